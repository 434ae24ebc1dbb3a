//! `UserQueue`: one actor per user holding its QUEUED jobs in order — `priority`
//! (higher first), then `submitted_at`, then id — and telling the arbiter whenever the
//! grantable front of the queue (its window) changes.
//!
//! It holds the policy's summary of each job ([`QueuedJob`]: id, resources, priority,
//! submit time), not the entrypoint or runtime_env: the dispatcher reads those from the
//! database when it submits. A *held* job (an earlier Ray attempt not yet confirmed
//! stopped) keeps its place but is left out of the window until [`Release`].

use std::cmp::Reverse;
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use actix::{Actor, Context, Handler};

use super::messages::{
    ArbiterHandle, Compact, Demand, Dispatch, DispatcherHandle, EnqueueBatch, Grant, GrantDeclined,
    Hold, QueueHandle, QueuePlace, Release, RemoveQueued,
};
use crate::policy::custom::Custom;
use crate::policy::{JobId, QueuedJob, Resources};

/// Queue order: priority (higher first), submit time (microseconds since the epoch),
/// id. 32 bytes.
type QueueKey = (Reverse<i32>, i64, JobId);

/// Jobs in a queue before it first rebuilds its B-tree ([`UserQueue::compact`]):
/// below this a queue fills a few nodes, and most users' queues are short.
const COMPACT_FROM: usize = 64;

/// The longest queue that rebuilds itself as it grows: a rebuild holds every actor
/// of the scheduler's thread for its length (1 to 2 ms at this size on the 2-core
/// machine of BENCHMARKS.md), which a finish → dispatch path of a few milliseconds
/// cannot afford more. Longer queues are rebuilt once recovery is done ([`Compact`]).
const COMPACT_UP_TO: usize = 16_384;

/// A queued job as the queue keeps it beside its key: what [`QueuedJob`] has beyond
/// the key, in 40 bytes, so that a job costs 72 bytes in a B-tree leaf (BENCHMARKS.md,
/// "Intake and scale", has the memory per queued job). Cores, GPUs and bytes are kept
/// here; custom amounts ([`crate::policy::custom::Custom`], 72 bytes, on few jobs) in
/// the queue's side table, flagged [`Entry::CUSTOM`]; the runtime estimate (seconds)
/// is `NaN` for "none". [`Entry::job`] gives back the [`QueuedJob`] it was made from,
/// bit for bit.
#[derive(Clone, Copy)]
struct Entry {
    /// [`Resources::builtin`]: cores, GPUs, bytes.
    builtin: [f64; 3],
    /// Seconds; `NaN`: none (the arbiter fills in the configured default).
    runtime_estimate: f64,
    /// [`QueuedJob::preemptions`].
    preemptions: u32,
    /// [`QueuedJob::pool`]: 0 for none, else 1 + its index in the queue's `pools`.
    pool: u16,
    /// [`Entry::HELD`], [`Entry::PREEMPTIBLE`], [`Entry::CUSTOM`].
    flags: u8,
}

// The figure the docs give: a key and an entry fill 72 bytes of a B-tree leaf.
const _: () = assert!(std::mem::size_of::<Entry>() == 40);
const _: () = assert!(std::mem::size_of::<QueueKey>() == 32);

impl Entry {
    /// Held: an earlier attempt is not yet confirmed stopped; not in the window.
    const HELD: u8 = 1;
    /// [`QueuedJob::preemptible`].
    const PREEMPTIBLE: u8 = 2;
    /// The job's custom amounts are in the queue's side table.
    const CUSTOM: u8 = 4;

    fn new(job: &QueuedJob, held: bool, pool: u16) -> Entry {
        let mut e = Entry {
            builtin: job.resources.builtin(),
            runtime_estimate: job.runtime_estimate.unwrap_or(f64::NAN),
            preemptions: job.preemptions,
            pool,
            flags: 0,
        };
        e.set(Entry::HELD, held);
        e.set(Entry::PREEMPTIBLE, job.preemptible);
        e.set(Entry::CUSTOM, has_custom(&job.resources));
        e
    }

    fn is(&self, flag: u8) -> bool {
        self.flags & flag != 0
    }

    fn set(&mut self, flag: u8, on: bool) {
        if on {
            self.flags |= flag;
        } else {
            self.flags &= !flag;
        }
    }

    fn held(&self) -> bool {
        self.is(Entry::HELD)
    }

    /// The job again, its custom amounts (if flagged) taken from `custom`.
    fn job(
        &self,
        key: &QueueKey,
        pools: &[Arc<str>],
        custom: &HashMap<QueueKey, Custom>,
    ) -> QueuedJob {
        let [cpu, gpu, memory_bytes] = self.builtin;
        let mut resources = Resources::new(cpu, gpu, memory_bytes);
        if self.is(Entry::CUSTOM) {
            if let Some(c) = custom.get(key) {
                resources.custom = *c;
            }
        }
        QueuedJob {
            job_id: key.2,
            resources,
            priority: key.0 .0,
            submitted_at: key.1 as f64 / 1e6,
            runtime_estimate: Some(self.runtime_estimate).filter(|e| !e.is_nan()),
            preemptible: self.is(Entry::PREEMPTIBLE),
            preemptions: self.preemptions,
            pool: (self.pool > 0)
                .then(|| pools.get(usize::from(self.pool) - 1))
                .flatten()
                .map(|p| p.to_string()),
        }
    }
}

/// Whether `r` has custom amounts to keep in the side table: any slot set, zeros
/// too, so that the vector comes back as it was.
fn has_custom(r: &Resources) -> bool {
    !r.custom.amounts().is_empty()
}

fn key_at(place: QueuePlace, job_id: JobId) -> QueueKey {
    (Reverse(place.priority), place.submitted_at_us, job_id)
}

fn key_of(job: &QueuedJob) -> QueueKey {
    key_at(QueuePlace::of(job), job.job_id)
}

/// The queue of one user.
pub struct UserQueue {
    user: String,
    window: usize,
    /// The queued jobs in queue order. No map from id to key: a message that removes
    /// a job carries its place ([`QueuePlace`]), a grant names a job of the window last
    /// sent, and a release names a held job (see [`UserQueue::find`]).
    jobs: BTreeMap<QueueKey, Entry>,
    /// The keys of the held jobs (few: earlier attempts not yet confirmed stopped).
    held: Vec<QueueKey>,
    arbiter: ArbiterHandle,
    dispatcher: DispatcherHandle,
    /// The keys of the window last sent.
    last_sent: Option<Vec<QueueKey>>,
    /// The names of the pools its jobs name, in the order first seen (an entry keeps
    /// an index into it, not the name).
    pools: Vec<Arc<str>>,
    /// The custom amounts of the queued jobs that have some ([`Entry::CUSTOM`]), by
    /// the job's key (as `jobs`, so that the two never disagree).
    custom: HashMap<QueueKey, Custom>,
    /// Jobs queued at which [`UserQueue::compact`] runs next.
    compact_at: usize,
}

impl UserQueue {
    /// An empty queue for `user` that shows the arbiter its first `window` grantable
    /// jobs.
    pub fn new(
        user: String,
        window: usize,
        arbiter: ArbiterHandle,
        dispatcher: DispatcherHandle,
    ) -> Self {
        UserQueue {
            user,
            window: window.max(1),
            jobs: BTreeMap::new(),
            held: Vec::new(),
            arbiter,
            dispatcher,
            last_sent: None,
            pools: Vec::new(),
            custom: HashMap::new(),
            compact_at: COMPACT_FROM,
        }
    }

    /// The index an entry keeps for `pool` (0: none), the name added if new. Names come
    /// from jobs accepted against `[[pools]]`, of which the configuration allows at
    /// most 1,000, so the index never overflows (were it to, 0 would be kept).
    fn pool_index(&mut self, pool: Option<&str>) -> u16 {
        let Some(name) = pool else { return 0 };
        if let Some(i) = self.pools.iter().position(|p| &**p == name) {
            return u16::try_from(i + 1).unwrap_or(0);
        }
        self.pools.push(Arc::from(name));
        u16::try_from(self.pools.len()).unwrap_or(0)
    }

    /// Starts a queue actor and returns its handle.
    pub fn spawn(
        user: String,
        window: usize,
        arbiter: ArbiterHandle,
        dispatcher: DispatcherHandle,
    ) -> QueueHandle {
        let addr = UserQueue::new(user, window, arbiter, dispatcher).start();
        QueueHandle {
            enqueue: addr.clone().recipient(),
            grant: addr.clone().recipient(),
            remove: addr.clone().recipient(),
            release: addr.clone().recipient(),
            hold: addr.clone().recipient(),
            compact: addr.recipient(),
        }
    }

    /// Sends `Demand` if the window differs from the one last sent.
    fn announce(&mut self) {
        let keys: Vec<QueueKey> = self
            .jobs
            .iter()
            .filter(|(_, e)| !e.held())
            .map(|(k, _)| *k)
            .take(self.window)
            .collect();
        if self.last_sent.as_ref() == Some(&keys) {
            return;
        }
        let window = keys
            .iter()
            .filter_map(|k| {
                self.jobs
                    .get(k)
                    .map(|e| e.job(k, &self.pools, &self.custom))
            })
            .collect();
        self.last_sent = Some(keys);
        self.arbiter.demand.do_send(Demand {
            user: self.user.clone(),
            window,
        });
    }

    /// Whether a new job with `key` comes after the whole window last sent, and that
    /// window is full: then the window does not change.
    fn behind_full_window(&self, key: &QueueKey) -> bool {
        self.last_sent
            .as_ref()
            .filter(|w| w.len() >= self.window)
            .and_then(|w| w.last())
            .is_some_and(|last| key > last)
    }

    /// Adds a job, or (already queued) sets whether it is held. Returns whether the
    /// window may have changed.
    fn insert(&mut self, job: &QueuedJob, held: bool) -> bool {
        let key = key_of(job);
        if let Some(e) = self.jobs.get_mut(&key) {
            if e.held() == held {
                return false;
            }
            e.set(Entry::HELD, held);
            if held {
                self.held.push(key);
            } else {
                self.held.retain(|k| *k != key);
            }
            return true;
        }
        let pool = self.pool_index(job.pool.as_deref());
        let entry = Entry::new(job, held, pool);
        if entry.is(Entry::CUSTOM) {
            self.custom.insert(key, job.resources.custom);
        }
        self.jobs.insert(key, entry);
        if held {
            self.held.push(key);
            // A held job is not in the window.
            return false;
        }
        // A queue loaded at start gets its jobs in order: almost all of them land
        // behind a full window, where nothing is to compare or send.
        !self.behind_full_window(&key)
    }

    /// The key of queued job `id`: at `place` if given, else among the held jobs and
    /// the window last sent, else (rarely: a grant from a window since replaced) by a
    /// scan of the queue.
    fn find(&self, id: JobId, place: Option<QueuePlace>) -> Option<QueueKey> {
        if let Some(p) = place {
            let key = key_at(p, id);
            if self.jobs.contains_key(&key) {
                return Some(key);
            }
        }
        let known = self.held.iter().chain(self.last_sent.iter().flatten());
        if let Some(k) = known.copied().find(|k| k.2 == id) {
            if self.jobs.contains_key(&k) {
                return Some(k);
            }
        }
        self.jobs.keys().find(|k| k.2 == id).copied()
    }

    /// Rebuilds the B-tree from its jobs in order, every node full, and sets the
    /// next rebuild at half as many jobs again ([`COMPACT_FROM`] at least).
    ///
    /// Why: jobs mostly arrive in queue order (recovery reads them so, and a new
    /// job of the same priority goes last), and a B-tree filled in order splits its
    /// last node each time it fills, leaving the left half behind: every node stays
    /// about half full, 137 bytes a queued job against 75 when full (BENCHMARKS.md,
    /// "Intake and scale"). `BTreeMap::from_iter` fills every node (a sorted input
    /// is sorted again in one pass). Rebuilding each time the queue has grown by
    /// half keeps at most a third of it in half-full nodes, moves each job about
    /// three times in all (about 60 ns a job each time), and hands the old nodes
    /// back while the queue is still growing, so that they are used again rather
    /// than left idle at the peak. Nothing the queue shows changes.
    fn compact(&mut self) {
        self.jobs = std::mem::take(&mut self.jobs).into_iter().collect();
        self.compact_at = COMPACT_FROM.max(self.jobs.len() + self.jobs.len() / 2);
    }

    fn remove(&mut self, key: &QueueKey) -> Option<QueuedJob> {
        let e = self.jobs.remove(key)?;
        if e.held() {
            self.held.retain(|k| k != key);
        }
        let job = e.job(key, &self.pools, &self.custom);
        if e.is(Entry::CUSTOM) {
            self.custom.remove(key);
        }
        Some(job)
    }
}

impl Actor for UserQueue {
    type Context = Context<Self>;
}

impl Handler<EnqueueBatch> for UserQueue {
    type Result = ();

    fn handle(&mut self, msg: EnqueueBatch, _: &mut Context<Self>) {
        let mut changed = false;
        for (job, held) in &msg.jobs {
            changed |= self.insert(job, *held);
        }
        if self.jobs.len() >= self.compact_at && self.jobs.len() <= COMPACT_UP_TO {
            self.compact();
        }
        if changed {
            self.announce();
        }
    }
}

impl Handler<Grant> for UserQueue {
    type Result = ();

    fn handle(&mut self, msg: Grant, _: &mut Context<Self>) {
        let key = self
            .find(msg.job_id, None)
            .filter(|k| self.jobs.get(k).is_some_and(|e| !e.held()));
        match key.and_then(|k| self.remove(&k)) {
            Some(job) => {
                self.dispatcher.dispatch.do_send(Dispatch {
                    user: self.user.clone(),
                    job,
                    cluster: msg.cluster,
                    granted_at: msg.granted_at,
                    freed_at: msg.freed_at,
                });
                self.announce();
            }
            None => {
                tracing::debug!(user = %self.user, job_id = %msg.job_id, "grant for a job no longer grantable");
                self.arbiter
                    .grant_declined
                    .do_send(GrantDeclined { job_id: msg.job_id });
            }
        }
    }
}

impl Handler<RemoveQueued> for UserQueue {
    type Result = ();

    fn handle(&mut self, msg: RemoveQueued, _: &mut Context<Self>) {
        let key = self.find(msg.job_id, msg.place);
        if key.and_then(|k| self.remove(&k)).is_some() {
            self.announce();
        }
    }
}

impl Handler<Release> for UserQueue {
    type Result = ();

    fn handle(&mut self, msg: Release, _: &mut Context<Self>) {
        let Some(key) = self.held.iter().copied().find(|k| k.2 == msg.job_id) else {
            return;
        };
        self.held.retain(|k| *k != key);
        if let Some(e) = self.jobs.get_mut(&key) {
            e.set(Entry::HELD, false);
            self.announce();
        }
    }
}

impl Handler<Compact> for UserQueue {
    type Result = ();

    /// [`UserQueue::compact`], whatever the queue's growth since the last one.
    fn handle(&mut self, _: Compact, _: &mut Context<Self>) {
        self.compact();
    }
}

impl Handler<Hold> for UserQueue {
    type Result = ();

    fn handle(&mut self, msg: Hold, _: &mut Context<Self>) {
        let key = key_at(msg.place, msg.job_id);
        match self.jobs.get_mut(&key) {
            Some(e) if !e.held() => {
                e.set(Entry::HELD, true);
                self.held.push(key);
                self.announce();
            }
            // Held already, or granted meanwhile: the grant's write is refused (the
            // job has a retiring attempt) and the dispatcher queues it back held.
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use actix::{Actor, Addr, Context, Handler, Message};

    use super::*;
    use crate::actors::messages::{
        CapacityChanged, DispatchEnded, Hold, JobFinished, Preempt, PreemptDeclined, Requeued,
        StopInRay,
    };

    /// What the queue sent: each window announced (ids), jobs dispatched, grants
    /// declined.
    #[derive(Default)]
    struct Seen {
        windows: Vec<Vec<JobId>>,
        dispatched: Vec<JobId>,
        declined: Vec<JobId>,
    }

    struct Sink(Arc<Mutex<Seen>>);

    impl Actor for Sink {
        type Context = Context<Self>;
    }

    /// Answered once every message sent to the sink before it is handled.
    #[derive(Message)]
    #[rtype(result = "()")]
    struct Flush;

    macro_rules! ignore {
        ($($m:ty),*) => {$(
            impl Handler<$m> for Sink {
                type Result = ();
                fn handle(&mut self, _: $m, _: &mut Context<Self>) {}
            }
        )*};
    }
    ignore!(
        Flush,
        DispatchEnded,
        Hold,
        CapacityChanged,
        JobFinished,
        Requeued,
        Release,
        RemoveQueued,
        StopInRay,
        Preempt,
        PreemptDeclined,
        super::super::messages::PoolAdmitted
    );

    impl Handler<Demand> for Sink {
        type Result = ();
        fn handle(&mut self, msg: Demand, _: &mut Context<Self>) {
            let ids = msg.window.iter().map(|j| j.job_id).collect();
            self.0.lock().unwrap().windows.push(ids);
        }
    }

    impl Handler<Dispatch> for Sink {
        type Result = ();
        fn handle(&mut self, msg: Dispatch, _: &mut Context<Self>) {
            self.0.lock().unwrap().dispatched.push(msg.job.job_id);
        }
    }

    impl Handler<GrantDeclined> for Sink {
        type Result = ();
        fn handle(&mut self, msg: GrantDeclined, _: &mut Context<Self>) {
            self.0.lock().unwrap().declined.push(msg.job_id);
        }
    }

    fn job(n: u128, priority: i32) -> QueuedJob {
        QueuedJob::new(
            JobId::from_u128(n),
            Resources::new(1.0, 0.0, 0.0),
            1_700_000_000.0 + n as f64 / 1e3,
        )
        .with_priority(priority)
    }

    fn grant(n: u128) -> Grant {
        Grant {
            job_id: JobId::from_u128(n),
            cluster: "c".into(),
            granted_at: 0.0,
            freed_at: None,
        }
    }

    /// The handles of a queue whose every message goes to `sink`.
    fn handles(sink: &Addr<Sink>) -> (ArbiterHandle, DispatcherHandle) {
        let arbiter = ArbiterHandle {
            demand: sink.clone().recipient(),
            grant_declined: sink.clone().recipient(),
            dispatch_ended: sink.clone().recipient(),
            capacity: sink.clone().recipient(),
            finished: sink.clone().recipient(),
            requeued: sink.clone().recipient(),
            release: sink.clone().recipient(),
            remove_queued: sink.clone().recipient(),
            hold: sink.clone().recipient(),
            preempt_declined: sink.clone().recipient(),
            admitted: sink.clone().recipient(),
        };
        let dispatcher = DispatcherHandle {
            dispatch: sink.clone().recipient(),
            stop: sink.clone().recipient(),
            preempt: sink.clone().recipient(),
        };
        (arbiter, dispatcher)
    }

    async fn start(window: usize) -> (Addr<UserQueue>, Addr<Sink>, Arc<Mutex<Seen>>) {
        let seen = Arc::new(Mutex::new(Seen::default()));
        let sink = Sink(seen.clone()).start();
        let (arbiter, dispatcher) = handles(&sink);
        let queue = UserQueue::new("u".into(), window, arbiter, dispatcher).start();
        (queue, sink, seen)
    }

    fn ids(ns: &[u128]) -> Vec<JobId> {
        ns.iter().map(|n| JobId::from_u128(*n)).collect()
    }

    #[actix_rt::test]
    async fn a_queue_without_an_id_map_finds_jobs_to_grant_remove_and_release() {
        let (queue, sink, seen) = start(2).await;
        let batch = |jobs: Vec<(QueuedJob, bool)>| queue.send(EnqueueBatch { jobs });
        batch((1..=4).map(|n| (job(n, 0), false)).collect())
            .await
            .unwrap();
        // The same job again (API and recovery both saw it) changes nothing.
        batch(vec![(job(1, 0), false)]).await.unwrap();
        // A higher priority pushes job 2 out of the window.
        batch(vec![(job(5, 9), false)]).await.unwrap();
        // A grant from the window before (job 2) still finds its job.
        queue.send(grant(2)).await.unwrap();
        // Removal with its place, and without (a scan).
        let remove = |n: u128, place: Option<QueuePlace>| RemoveQueued {
            user: "u".into(),
            job_id: JobId::from_u128(n),
            place,
        };
        queue
            .send(remove(3, Some(QueuePlace::of(&job(3, 0)))))
            .await
            .unwrap();
        queue.send(remove(4, None)).await.unwrap();
        // A held job is not offered until released.
        batch(vec![(job(6, 9), true)]).await.unwrap();
        queue
            .send(Release {
                user: "u".into(),
                job_id: JobId::from_u128(6),
            })
            .await
            .unwrap();
        // A grant for a job no longer queued is declined.
        queue.send(grant(3)).await.unwrap();
        sink.send(Flush).await.unwrap();
        let seen = seen.lock().unwrap();
        assert_eq!(
            seen.windows,
            vec![ids(&[1, 2]), ids(&[5, 1]), ids(&[5, 6])],
            "one window per change that shows"
        );
        assert_eq!(seen.dispatched, ids(&[2]));
        assert_eq!(seen.declined, ids(&[3]));
    }

    /// A job and its queue entry, back again.
    fn round_trip(queue: &mut UserQueue, job: &QueuedJob, held: bool) -> QueuedJob {
        let pool = queue.pool_index(job.pool.as_deref());
        let entry = Entry::new(job, held, pool);
        assert_eq!(entry.held(), held);
        if entry.is(Entry::CUSTOM) {
            queue.custom.insert(key_of(job), job.resources.custom);
        }
        entry.job(&key_of(job), &queue.pools, &queue.custom)
    }

    #[actix_rt::test]
    async fn a_compact_entry_gives_back_the_job_it_was_made_from_bit_for_bit() {
        let (arbiter, dispatcher) = handles(&Sink(Arc::default()).start());
        let mut queue = UserQueue::new("u".into(), 1, arbiter, dispatcher);
        let qpu = crate::policy::custom::slot("test_queue_qpu").unwrap();
        let mut custom = Custom::EMPTY;
        custom.set(qpu, 0.25);
        let mut zero_custom = Custom::EMPTY;
        zero_custom.set(qpu, 0.0);
        let plain = job(1, -3);
        let full = QueuedJob {
            job_id: JobId::from_u128(u128::MAX - 7),
            resources: Resources::new(0.1 + 0.2, 0.5, 3.0 * 1024.0 * 1024.0 * 1024.0)
                .with_custom(custom),
            priority: i32::MAX,
            submitted_at: 1_764_633_600.123_456,
            runtime_estimate: Some(86_400.5),
            preemptible: true,
            preemptions: u32::MAX,
            pool: Some("runners".into()),
        };
        // A custom vector whose slots are all 0 keeps its length.
        let zeros = QueuedJob {
            job_id: JobId::from_u128(3),
            resources: Resources::new(f64::NAN, 0.0, 0.0).with_custom(zero_custom),
            preemptible: false,
            pool: None,
            ..full.clone()
        };
        for (j, held) in [(&plain, false), (&full, true), (&zeros, false)] {
            let back = round_trip(&mut queue, j, held);
            let bits = |r: &Resources| {
                let custom: Vec<u64> = r.custom.amounts().iter().map(|x| x.to_bits()).collect();
                (r.builtin().map(f64::to_bits), r.custom.len(), custom)
            };
            assert_eq!(bits(&back.resources), bits(&j.resources), "{j:?}");
            let rest = |q: &QueuedJob| {
                (
                    q.job_id,
                    q.priority,
                    q.submitted_at.to_bits(),
                    q.runtime_estimate.map(f64::to_bits),
                    q.preemptible,
                    q.preemptions,
                    q.pool.clone(),
                )
            };
            assert_eq!(rest(&back), rest(j));
        }
        assert_eq!(
            queue.custom.len(),
            2,
            "only jobs with custom amounts use the side table"
        );
    }

    #[actix_rt::test]
    async fn compacting_a_queue_changes_nothing_it_shows() {
        let (queue, sink, seen) = start(2).await;
        let jobs = (1..=100).map(|n| (job(n, 0), false)).collect();
        queue.send(EnqueueBatch { jobs }).await.unwrap();
        queue.send(Compact).await.unwrap();
        queue.send(grant(1)).await.unwrap();
        let jobs = vec![(job(101, 5), false)];
        queue.send(EnqueueBatch { jobs }).await.unwrap();
        queue.send(Compact).await.unwrap();
        queue.send(grant(100)).await.unwrap();
        sink.send(Flush).await.unwrap();
        let seen = seen.lock().unwrap();
        assert_eq!(
            seen.windows,
            vec![ids(&[1, 2]), ids(&[2, 3]), ids(&[101, 2])],
            "no window announced by a compaction; the queue's order kept"
        );
        assert_eq!(seen.dispatched, ids(&[1, 100]));
    }
}
