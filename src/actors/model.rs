//! The protocol at the Ray edge, model-checked (issue 26): one job of one user on one
//! cluster, and every interleaving (bounded) of what the arbiter, the dispatcher, the
//! monitor, the API and Ray do to it, explored by [`stateright`]'s checker.
//!
//! The model runs the real decisions: [`lifecycle::decide`] (through
//! [`lifecycle::updated`], the columns `store::apply` writes), the monitor's
//! [`Book`] and its probes ([`poll::probe_current`], [`poll::probe_retiring`], the
//! sweep of attempts nobody follows), the dispatcher's [`dispatcher::granted`],
//! [`dispatcher::answer_event`], [`dispatcher::recorded`], [`dispatcher::after`]
//! and the retry guard, and the cancel's [`super::cancelled`]. What it scripts is the
//! rest: the database as one row written atomically, the arbiter's reservation and
//! queue entry, the network (a POST delivered, late, lost, answered 5xx or refused;
//! an answer lost), Ray (an attempt starts, runs to completion, stops), the clock,
//! and a crash or a change of leader (in-memory state gone; POSTs already on the wire
//! may still land; a deposed leader's dispatch goes on but its writes are fenced).
//!
//! Properties (checked in every reachable state):
//! - never two attempts of the job alive in Ray;
//! - after every poll, every attempt alive in Ray is followed and counted: the current
//!   attempt of a job the arbiter holds capacity for (followed by the monitor or
//!   still in the dispatcher's hands), or an attempt the monitor follows as retiring
//!   or stray (counted as used capacity);
//! - an attempt of a cancelled job never runs to completion in Ray after fairshare
//!   learned of it without a stop sent;
//! - a job cancelled before it was RUNNING never ends SUCCEEDED unless Ray ran it to
//!   completion before anything of fairshare could know it existed.
//! - a cancelled job is never queued again by a preemption (issue 28: the cancel
//!   wins over a preemption's stop under way).
//!
//! [`Fault`] plants faults in the model's calls into the real code, to show that the
//! checker catches them (tests at the end).

use std::collections::{BTreeSet, HashSet};
use std::hash::{Hash, Hasher};
use std::time::{Duration, Instant};

use chrono::{DateTime, TimeZone, Utc};
use entity::{job, JobStatus};
use stateright::{Checker, Model, Property};
use uuid::Uuid;

use super::dispatcher::{self, Then};
use super::monitor::book::{Book, Effect, Origin, Retiring, Stray};
use super::monitor::poll::{self, ClusterPoll, Outcome, Probe, StrayFound};
use super::{cancelled, CancelThen};
use crate::lifecycle::{self, Decision, Event, JobFacts, Limits};
use crate::ray::{DispatchOutcome, RayJob, RayJobStatus};
use crate::store::Applied;

const CLUSTER: &str = "c";
const USER: &str = "u";
/// POSTs one dispatch may send (`dispatcher.retry_attempts`).
const BUDGET: u8 = 2;
/// Seconds the clock moves at each `Wait`: past the pending timeout, the lost-job
/// grace and the stop retry.
const WAIT_S: u64 = 100;

fn job_id() -> Uuid {
    Uuid::from_u128(0x0123_4567_89ab_cdef_0123_4567_89ab_cdef)
}

fn limits() -> Limits {
    Limits {
        pending_timeout_s: 60.0,
        scale_up: false,
        max_runtime_s: 150.0,
        lost_job_grace_s: 60.0,
        preemption_grace_s: 30.0,
    }
}

/// A fault planted in the model's calls into the real code.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Fault {
    /// None: the code as it is.
    None,
    /// The step for Ray's acceptance forgets the stop a cancel asked for meanwhile.
    AcceptForgetsStop,
    /// The monitor's sweep of attempts nobody follows is skipped.
    NoSweep,
    /// The monitor follows a DISPATCHING job handed over by a cancel as if it had been
    /// recovered (the bug of issue 26: its submit is still in flight).
    FollowInFlight,
}

/// Ray's record of one attempt.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct RayRec {
    attempt: u32,
    status: RayJobStatus,
    stop_requested: bool,
}

/// A `POST /api/jobs/` on the wire.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct Post {
    attempt: u32,
    /// The process generation that sent it.
    gen: u8,
    /// Its sender still waits for the answer.
    awaited: bool,
}

/// An answer a dispatch is waiting to handle.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum Answer {
    Accepted,
    Duplicate,
    Refused,
    /// 5xx, or a timeout (no answer): settled by a GET.
    Ambiguous,
}

/// One dispatch in flight (the grant is written; POSTs are being sent).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct Submit {
    attempt: u32,
    posts: u8,
    gen: u8,
    answer: Option<Answer>,
}

/// The arbiter's view of the job.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
struct Arb {
    queued: bool,
    held: bool,
    /// Capacity is reserved for it (a grant, or an outstanding job).
    outstanding: bool,
}

/// The state of the world.
#[derive(Clone, Debug)]
pub(crate) struct S {
    row: job::Model,
    paused: bool,
    ray: Vec<RayRec>,
    wire: Vec<Post>,
    gen: u8,
    submit: Option<Submit>,
    /// A deposed leader's dispatch: it goes on, its writes are fenced.
    zombie: Option<Submit>,
    book: Book,
    arb: Arb,
    now_s: u64,
    // Bounds.
    crashes: u8,
    cancels: u8,
    pauses: u8,
    waits: u8,
    network_faults: u8,
    preempts: u8,
    // Ghosts (what the properties read).
    /// The job's preemption count when a cancel was written (a cancel wins: it never
    /// goes back to the queue by a preemption after that).
    preemptions_at_cancel: Option<i32>,
    known: BTreeSet<u32>,
    cancelled_before_running: bool,
    unaccounted: Option<String>,
    completed_known: Option<u32>,
    completed_unknown: bool,
}

impl S {
    /// Everything that tells two states apart.
    #[allow(clippy::type_complexity)]
    fn key(
        &self,
    ) -> (
        (
            JobStatus,
            i32,
            Option<i32>,
            bool,
            &Option<String>,
            Option<DateTime<Utc>>,
            Option<DateTime<Utc>>,
            (Option<DateTime<Utc>>, i32),
        ),
        (bool, &Vec<RayRec>, &Vec<Post>, u8),
        (&Option<Submit>, &Option<Submit>, &Arb, u64),
        (u8, u8, u8, u8, u8, u8),
        (
            &BTreeSet<u32>,
            bool,
            &Option<String>,
            Option<u32>,
            bool,
            Option<i32>,
        ),
        crate::actors::monitor::book::BookKey,
    ) {
        let r = &self.row;
        (
            (
                r.status,
                r.attempt,
                r.retiring_attempt,
                r.stop_reason.is_some(),
                &r.cluster,
                r.dispatched_at,
                r.started_at,
                (r.preempted_at, r.preemptions),
            ),
            (self.paused, &self.ray, &self.wire, self.gen),
            (&self.submit, &self.zombie, &self.arb, self.now_s),
            (
                self.crashes,
                self.cancels,
                self.pauses,
                self.waits,
                self.network_faults,
                self.preempts,
            ),
            (
                &self.known,
                self.cancelled_before_running,
                &self.unaccounted,
                self.completed_known,
                self.completed_unknown,
                self.preemptions_at_cancel,
            ),
            self.book.key(),
        )
    }
}

impl Hash for S {
    fn hash<H: Hasher>(&self, h: &mut H) {
        self.key().hash(h);
    }
}

impl PartialEq for S {
    fn eq(&self, other: &S) -> bool {
        self.key() == other.key()
    }
}

/// What can happen next.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(crate) enum A {
    Grant,
    /// Ray gets POST `i`; its answer reaches the sender if it still waits.
    Deliver(usize),
    /// Ray gets POST `i`; the answer is lost (the sender times out).
    LoseAnswer(usize),
    /// The sender times out on POST `i`, which stays on the wire (it may land late).
    TimeOut(usize),
    /// A proxy answers POST `i` with 503; Ray never sees it.
    Proxy5xx(usize),
    /// Ray refuses POST `i` (400).
    Refuse(usize),
    /// The dispatcher handles its answer (`zombie`: the deposed leader's).
    Answer {
        zombie: bool,
    },
    Poll,
    Cancel,
    Pause,
    Resume,
    RayStart(usize),
    RayFinish(usize),
    RayStopTakesEffect(usize),
    /// The arbiter's policy preempts the job (issue 28): the dispatcher writes the
    /// `Preempt` step, sends the stop and hands the row to the monitor.
    Preempt,
    Wait,
    Crash,
    LeaderChange,
}

/// The model: which faults are planted, and the clock's origin.
pub(crate) struct Edge {
    faults: Vec<Fault>,
    base: Instant,
}

impl Edge {
    pub(crate) fn new(faults: &[Fault]) -> Edge {
        Edge {
            faults: faults.to_vec(),
            base: Instant::now(),
        }
    }

    fn has(&self, f: Fault) -> bool {
        self.faults.contains(&f)
    }

    fn instant(&self, s: &S) -> Instant {
        self.base + Duration::from_secs(s.now_s)
    }

    fn utc(s: &S) -> DateTime<Utc> {
        Utc.timestamp_opt(1_800_000_000 + s.now_s as i64, 0)
            .single()
            .unwrap_or_default()
    }

    fn ray_job(s: &S, attempt: u32) -> Option<RayJob> {
        s.ray.iter().find(|r| r.attempt == attempt).map(|r| RayJob {
            submission_id: Some(lifecycle::submission_id(job_id(), r.attempt)),
            job_id: None,
            status: r.status.clone(),
            message: None,
            error_type: None,
            start_time: None,
            end_time: None,
            driver_exit_code: None,
        })
    }

    /// `store::apply`: decide on the row as it is, write the step atomically.
    fn apply(&self, s: &mut S, event: &Event) -> Applied {
        let facts = JobFacts::of(&s.row);
        match lifecycle::decide(job_id(), &facts, event) {
            Decision::Step(mut step) => {
                if self.has(Fault::AcceptForgetsStop) && matches!(event, Event::RayAccepted { .. })
                {
                    step.ray = None;
                }
                s.row = lifecycle::updated(&s.row, &step, Self::utc(s));
                Applied::Changed {
                    job: s.row.clone(),
                    step,
                }
            }
            Decision::Ignore => Applied::Unchanged(s.row.clone()),
            Decision::Refuse(r) => Applied::Refused(s.row.clone(), r),
        }
    }

    fn stop_in_ray(s: &mut S, submission_id: &str) {
        let Some((_, attempt)) = lifecycle::parse_submission_id(submission_id) else {
            return;
        };
        if let Some(r) = s.ray.iter_mut().find(|r| r.attempt == attempt) {
            r.stop_requested = true;
        }
    }

    fn dispatch_ended(s: &mut S, requeue: bool) {
        s.arb.outstanding = false;
        if requeue {
            s.arb.queued = true;
            s.arb.held = false;
        }
    }

    fn carry_then(&self, s: &mut S, then: Vec<Then>) {
        let now = self.instant(s);
        for t in then {
            match t {
                Then::Track(job) => s.book.track(*job, Origin::Dispatched, now),
                Then::Stop(stop) => Self::stop_in_ray(s, &stop.submission_id),
                Then::Unreachable(_) => {}
                Then::Ended(e) => Self::dispatch_ended(s, e.requeue.is_some()),
            }
        }
    }

    fn carry_effects(s: &mut S, effects: Vec<Effect>) {
        for e in effects {
            match e {
                Effect::Stop { submission_id, .. } => Self::stop_in_ray(s, &submission_id),
                Effect::Finished { .. } => s.arb.outstanding = false,
                Effect::Requeued { held, .. } => {
                    s.arb.outstanding = false;
                    s.arb.queued = true;
                    s.arb.held = held;
                }
                Effect::Release { .. } => s.arb.held = false,
                // Only how often the poll comes.
                Effect::Unannounced { .. }
                | Effect::Announced { .. }
                | Effect::Late { .. }
                | Effect::NoticePathChanged { .. } => {}
                Effect::RemoveQueued { .. } => s.arb.queued = false,
                Effect::Hold { .. } => {
                    if s.arb.queued {
                        s.arb.held = true;
                    }
                }
            }
        }
    }

    fn grant(&self, s: &mut S) {
        s.arb.queued = false;
        s.arb.outstanding = true;
        let applied = self.apply(
            s,
            &Event::Granted {
                cluster: CLUSTER.into(),
            },
        );
        match dispatcher::granted(applied) {
            Ok((job, _sid)) => {
                let attempt = job.attempt as u32;
                s.submit = Some(Submit {
                    attempt,
                    posts: 1,
                    gen: s.gen,
                    answer: None,
                });
                s.wire.push(Post {
                    attempt,
                    gen: s.gen,
                    awaited: true,
                });
            }
            Err(landed) => {
                let then = dispatcher::after(CLUSTER, job_id(), USER, &landed);
                self.carry_then(s, then);
            }
        }
    }

    /// The answer to POST `i` reaches whoever waits for it.
    fn answer_post(s: &mut S, i: usize, answer: Answer) {
        let p = s.wire.remove(i);
        if !p.awaited {
            return;
        }
        for sub in [&mut s.submit, &mut s.zombie].into_iter().flatten() {
            if sub.gen == p.gen && sub.attempt == p.attempt && sub.answer.is_none() {
                sub.answer = Some(answer);
            }
        }
    }

    fn ray_receives(s: &mut S, attempt: u32) -> Answer {
        if s.ray.iter().any(|r| r.attempt == attempt) {
            return Answer::Duplicate;
        }
        s.ray.push(RayRec {
            attempt,
            status: RayJobStatus::Pending,
            stop_requested: false,
        });
        Answer::Accepted
    }

    /// The dispatcher handles its answer: settle an ambiguous one by a GET, retry
    /// within the budget, or record the outcome.
    fn answer(&self, s: &mut S, zombie: bool) {
        let slot = if zombie { &mut s.zombie } else { &mut s.submit };
        let Some(mut sub) = slot.take() else { return };
        let Some(answer) = sub.answer.take() else {
            *slot = Some(sub);
            return;
        };
        let in_ray = s.ray.iter().any(|r| r.attempt == sub.attempt);
        let outcome = match answer {
            Answer::Accepted => DispatchOutcome::Submitted {
                already_existed: false,
                attempts: sub.posts.into(),
            },
            Answer::Duplicate => DispatchOutcome::Submitted {
                already_existed: true,
                attempts: sub.posts.into(),
            },
            Answer::Refused => DispatchOutcome::Rejected {
                message: "bad field".into(),
            },
            Answer::Ambiguous if in_ray => DispatchOutcome::Submitted {
                already_existed: true,
                attempts: sub.posts.into(),
            },
            Answer::Ambiguous => {
                let facts = JobFacts::of(&s.row);
                let go_on = sub.posts < BUDGET
                    && dispatcher::keep_trying(&facts, sub.attempt, !zombie).is_ok();
                if go_on {
                    sub.posts += 1;
                    s.wire.push(Post {
                        attempt: sub.attempt,
                        gen: sub.gen,
                        awaited: true,
                    });
                    let slot = if zombie { &mut s.zombie } else { &mut s.submit };
                    *slot = Some(sub);
                    return;
                }
                DispatchOutcome::GaveUp {
                    last_error: "503".into(),
                    attempts: sub.posts.into(),
                }
            }
        };
        // What a deposed leader learns is not the service's knowledge: it can no
        // longer write, and the new leader learns it at its first poll.
        if !zombie && matches!(outcome, DispatchOutcome::Submitted { .. }) {
            s.known.insert(sub.attempt);
        }
        if zombie {
            // Fenced: the write is refused and nothing is announced.
            return;
        }
        let event = dispatcher::answer_event(CLUSTER, outcome);
        let applied = self.apply(s, &event);
        let landed = dispatcher::recorded(applied);
        let then = dispatcher::after(CLUSTER, job_id(), USER, &landed);
        self.carry_then(s, then);
    }

    /// One poll of the cluster, as `poll::poll_cluster` runs it and the monitor
    /// absorbs it.
    fn poll(&self, s: &mut S) {
        let now = self.instant(s);
        let now_utc = Self::utc(s);
        let followed_before = s.book.followed_on(CLUSTER);
        let mut current = Vec::new();
        let followed: Vec<_> = s.book.current_on(CLUSTER).cloned().collect();
        for t in followed {
            let attempt = t.job.attempt as u32;
            let ray = Self::ray_job(s, attempt);
            // A lookup by id sees what the list sees.
            let _ = poll::needs_lookup(&t, ray.as_ref());
            if ray.is_some() {
                s.known.insert(attempt);
            }
            let probe = poll::probe_current(&t, CLUSTER, ray.as_ref(), &limits(), now_utc, now);
            current.push((t.job.id, self.carry_probe(s, probe)));
        }
        let mut retiring = Vec::new();
        let followed: Vec<Retiring> = s.book.retiring_on(CLUSTER).cloned().collect();
        for r in followed {
            let ray = Self::ray_job(s, r.attempt);
            if ray.is_some() {
                s.known.insert(r.attempt);
            }
            let probe = poll::probe_retiring(&r, ray.as_ref(), now);
            retiring.push((r.job_id, self.carry_probe(s, probe)));
        }
        let mut strays = Vec::new();
        let followed: Vec<Stray> = s.book.strays_on(CLUSTER).cloned().collect();
        for st in followed {
            let ray = Self::ray_job(s, st.attempt);
            let probe = poll::probe_followed_stray(&st, ray.as_ref(), now);
            let found = StrayFound {
                job_id: st.job_id,
                attempt: st.attempt,
                resources: st.resources,
            };
            strays.push((found, self.carry_probe(s, probe)));
        }
        if !self.has(Fault::NoSweep) {
            self.sweep(s, &followed_before, &mut strays);
        }
        let result = ClusterPoll {
            name: CLUSTER.into(),
            usage: Ok(Default::default()),
            jobs: Ok(()),
            current,
            retiring,
            strays,
            usage_now: None,
            state_cost: None,
        };
        let (effects, _) = s.book.absorb(result, now);
        Self::carry_effects(s, effects);
        s.unaccounted = s.unaccounted.take().or_else(|| Self::unaccounted(s));
    }

    /// The sweep of `poll::poll_cluster`: every attempt Ray lists alive that the book
    /// did not follow when the poll began is judged against the row.
    fn sweep(
        &self,
        s: &mut S,
        followed: &HashSet<(Uuid, u32)>,
        out: &mut Vec<(StrayFound, Outcome)>,
    ) {
        let listed: Vec<u32> = s
            .ray
            .iter()
            .filter(|r| !r.status.is_terminal())
            .map(|r| r.attempt)
            .collect();
        for attempt in listed {
            if followed.contains(&(job_id(), attempt)) {
                continue;
            }
            s.known.insert(attempt);
            let facts = JobFacts::of(&s.row);
            let outcome = match poll::probe_stray(&facts, attempt, CLUSTER, job_id()) {
                Probe::FollowRetiring => {
                    Outcome::FollowRetiring(Box::new(Retiring::new(&s.row, CLUSTER, attempt)))
                }
                probe => self.carry_probe(s, probe),
            };
            let found = StrayFound {
                job_id: job_id(),
                attempt,
                resources: crate::store::resources_of(&s.row),
            };
            out.push((found, outcome));
        }
    }

    fn carry_probe(&self, s: &mut S, probe: Probe) -> Outcome {
        match probe {
            Probe::Apply(event) => Outcome::Applied(Box::new(self.apply(s, &event))),
            Probe::Missing => Outcome::Missing,
            Probe::StopDue(sid) => Outcome::StopDue(sid),
            Probe::Seen { running, pending } => Outcome::Seen { running, pending },
            Probe::Ours | Probe::FollowRetiring => Outcome::Ours,
            Probe::StopOurs(sid) => Outcome::StopOurs(sid),
        }
    }

    /// An attempt alive in Ray that nothing follows and counts, if any.
    fn unaccounted(s: &S) -> Option<String> {
        for r in s.ray.iter().filter(|r| !r.status.is_terminal()) {
            let a = r.attempt;
            let current = a == s.row.attempt as u32
                && s.row.status.is_outstanding()
                && s.arb.outstanding
                && (s.book.current(&job_id()).is_some() || s.submit.is_some());
            let retiring = s.book.retiring(&job_id()).is_some_and(|t| t.attempt == a);
            if !(current || retiring || s.book.follows_stray(job_id(), a)) {
                return Some(format!(
                    "attempt {a} is {:?} in Ray; the row is {} attempt {}; arbiter {:?}",
                    r.status, s.row.status, s.row.attempt, s.arb
                ));
            }
        }
        None
    }

    fn cancelled(s: &S) -> bool {
        s.row.stop_reason.is_some() || s.row.status == JobStatus::Stopped
    }

    fn recover(&self, s: &mut S) {
        let now = self.instant(s);
        s.book = Book::default();
        s.arb = Arb::default();
        let row = s.row.clone();
        if row.status.is_outstanding() {
            s.arb.outstanding = true;
            s.book.track(row, Origin::Recovered, now);
        } else if row.status == JobStatus::Queued {
            s.arb.queued = true;
            s.arb.held = row.retiring_attempt.is_some();
            if let (Some(attempt), Some(cluster)) = (row.retiring_attempt, &row.cluster) {
                s.book
                    .track_retiring(Retiring::new(&row, cluster, attempt as u32));
            }
        }
    }
}

pub(super) fn initial_row() -> job::Model {
    let at = Utc
        .timestamp_opt(1_800_000_000, 0)
        .single()
        .unwrap_or_default();
    job::Model {
        id: job_id(),
        user_id: USER.into(),
        external_id: None,
        status: JobStatus::Queued,
        priority: 0,
        entrypoint: "python main.py".into(),
        runtime_env: None,
        metadata: None,
        cpu: 1.0,
        gpu: 0.0,
        memory_bytes: 0,
        cluster: None,
        message: None,
        max_runtime_s: Some(150),
        submitted_at: at,
        dispatched_at: None,
        started_at: None,
        finished_at: None,
        attempt: 1,
        retiring_attempt: None,
        stop_reason: None,
        runtime_env_digest: None,
        preemptible: false,
        preemptions: 0,
        preempted_at: None,
        custom_resources: None,
        pool: None,
        lease_expires_at: None,
    }
}

impl Model for Edge {
    type State = S;
    type Action = A;

    fn init_states(&self) -> Vec<S> {
        vec![S {
            row: initial_row(),
            paused: false,
            ray: Vec::new(),
            wire: Vec::new(),
            gen: 0,
            submit: None,
            zombie: None,
            book: Book::default(),
            arb: Arb {
                queued: true,
                held: false,
                outstanding: false,
            },
            now_s: 0,
            crashes: 0,
            cancels: 0,
            pauses: 0,
            waits: 0,
            network_faults: 0,
            preempts: 0,
            preemptions_at_cancel: None,
            known: BTreeSet::new(),
            cancelled_before_running: false,
            unaccounted: None,
            completed_known: None,
            completed_unknown: false,
        }]
    }

    fn actions(&self, s: &S, actions: &mut Vec<A>) {
        if s.arb.queued && !s.arb.held && !s.paused && s.submit.is_none() && !s.arb.outstanding {
            actions.push(A::Grant);
        }
        for (i, p) in s.wire.iter().enumerate() {
            actions.push(A::Deliver(i));
            if s.network_faults < 2 && p.awaited {
                actions.push(A::LoseAnswer(i));
                actions.push(A::TimeOut(i));
                actions.push(A::Proxy5xx(i));
                actions.push(A::Refuse(i));
            }
        }
        if s.submit.as_ref().is_some_and(|x| x.answer.is_some()) {
            actions.push(A::Answer { zombie: false });
        }
        if s.zombie.as_ref().is_some_and(|x| x.answer.is_some()) {
            actions.push(A::Answer { zombie: true });
        }
        actions.push(A::Poll);
        if s.cancels == 0 && !s.row.status.is_terminal() {
            actions.push(A::Cancel);
        }
        if s.pauses == 0 && !s.paused {
            actions.push(A::Pause);
        }
        if s.paused {
            actions.push(A::Resume);
        }
        for (i, r) in s.ray.iter().enumerate() {
            match r.status {
                RayJobStatus::Pending => actions.push(A::RayStart(i)),
                // Ray's stop of a RUNNING job ends it STOPPED (SIGTERM, then a kill).
                RayJobStatus::Running if r.stop_requested => actions.push(A::RayStopTakesEffect(i)),
                RayJobStatus::Running => actions.push(A::RayFinish(i)),
                _ => {}
            }
        }
        if s.waits < 2 {
            actions.push(A::Wait);
        }
        // Bounded like the other faults: preemption against crashes, a leader
        // change, cancels, the clock and Ray's answers, but not also against the
        // network's faults of the submit (three times the states for nothing new: a
        // job is preempted only once Ray has it).
        if s.preempts == 0
            && s.network_faults == 0
            && s.arb.outstanding
            && matches!(s.row.status, JobStatus::Pending | JobStatus::Running)
        {
            actions.push(A::Preempt);
        }
        if s.crashes == 0 {
            actions.push(A::Crash);
            actions.push(A::LeaderChange);
        }
    }

    fn next_state(&self, last: &S, action: A) -> Option<S> {
        let mut s = last.clone();
        match action {
            A::Grant => self.grant(&mut s),
            A::Deliver(i) => {
                let attempt = s.wire[i].attempt;
                let answer = Self::ray_receives(&mut s, attempt);
                Self::answer_post(&mut s, i, answer);
            }
            A::LoseAnswer(i) => {
                s.network_faults += 1;
                let attempt = s.wire[i].attempt;
                Self::ray_receives(&mut s, attempt);
                Self::answer_post(&mut s, i, Answer::Ambiguous);
            }
            A::TimeOut(i) => {
                s.network_faults += 1;
                let mut p = s.wire[i].clone();
                Self::answer_post(&mut s, i, Answer::Ambiguous);
                p.awaited = false;
                s.wire.push(p);
            }
            A::Proxy5xx(i) => {
                s.network_faults += 1;
                Self::answer_post(&mut s, i, Answer::Ambiguous);
            }
            A::Refuse(i) => {
                s.network_faults += 1;
                Self::answer_post(&mut s, i, Answer::Refused);
            }
            A::Answer { zombie } => self.answer(&mut s, zombie),
            A::Poll => self.poll(&mut s),
            A::Cancel => {
                s.cancels += 1;
                let started = s.ray.iter().any(|r| {
                    r.attempt == s.row.attempt as u32 && r.status != RayJobStatus::Pending
                });
                let before = s.row.status;
                let applied = self.apply(&mut s, &Event::CancelRequested);
                if let Applied::Changed { job, step } = applied {
                    s.preemptions_at_cancel = Some(job.preemptions);
                    if !started
                        && matches!(
                            before,
                            JobStatus::Queued | JobStatus::Dispatching | JobStatus::Pending
                        )
                    {
                        s.cancelled_before_running = true;
                    }
                    let now = self.instant(&s);
                    for then in cancelled(&job, step.ray) {
                        match then {
                            CancelThen::RemoveQueued(_) => s.arb.queued = false,
                            CancelThen::Track(job) => {
                                let job = *job;
                                let origin = if self.has(Fault::FollowInFlight) {
                                    Origin::Recovered
                                } else {
                                    Origin::Changed
                                };
                                s.book.track(job, origin, now)
                            }
                            CancelThen::Stop(stop) => {
                                Self::stop_in_ray(&mut s, &stop.submission_id)
                            }
                        }
                    }
                }
            }
            A::Pause => {
                s.pauses += 1;
                s.paused = true;
            }
            A::Resume => s.paused = false,
            A::RayStart(i) => {
                let r = &mut s.ray[i];
                r.status = if r.stop_requested {
                    RayJobStatus::Stopped
                } else {
                    RayJobStatus::Running
                };
            }
            A::RayFinish(i) => {
                let attempt = s.ray[i].attempt;
                s.ray[i].status = RayJobStatus::Succeeded;
                if Self::cancelled(&s) {
                    if s.known.contains(&attempt) {
                        s.completed_known = s.completed_known.or(Some(attempt));
                    } else {
                        s.completed_unknown = true;
                    }
                }
            }
            A::RayStopTakesEffect(i) => s.ray[i].status = RayJobStatus::Stopped,
            A::Preempt => {
                s.preempts += 1;
                let event = Event::Preempt {
                    for_job: Uuid::nil(),
                    for_user: "other".into(),
                    lost_core_seconds: 1.0,
                };
                let applied = self.apply(&mut s, &event);
                if let Some((stop, job)) = dispatcher::preempted(&applied, CLUSTER) {
                    if let Some(stop) = stop {
                        Self::stop_in_ray(&mut s, &stop.submission_id);
                    }
                    let now = self.instant(&s);
                    s.book.track(job, Origin::Changed, now);
                }
            }
            A::Wait => {
                s.waits += 1;
                s.now_s += WAIT_S;
            }
            A::Crash | A::LeaderChange => {
                s.crashes += 1;
                s.gen += 1;
                if action == A::LeaderChange {
                    s.zombie = s.submit.take();
                } else {
                    s.submit = None;
                    for p in &mut s.wire {
                        p.awaited = false;
                    }
                }
                self.recover(&mut s);
            }
        }
        Some(s)
    }

    fn properties(&self) -> Vec<Property<Self>> {
        vec![
            Property::always("never two attempts alive in Ray", |_, s: &S| {
                s.ray.iter().filter(|r| !r.status.is_terminal()).count() <= 1
            }),
            Property::always(
                "after a poll every attempt alive in Ray is followed and counted",
                |_, s: &S| s.unaccounted.is_none(),
            ),
            Property::always(
                "a cancelled job's known attempt never runs to completion without a stop",
                |_, s: &S| s.completed_known.is_none(),
            ),
            Property::always(
                "a cancelled job is never queued again by a preemption",
                |_, s: &S| {
                    s.preemptions_at_cancel
                        .is_none_or(|n| s.row.preemptions == n)
                },
            ),
            Property::always(
                "a job cancelled before RUNNING never ends SUCCEEDED",
                |_, s: &S| {
                    !(s.cancelled_before_running
                        && s.row.status == JobStatus::Succeeded
                        && !s.completed_unknown)
                },
            ),
        ]
    }
}

/// Checks the model with `fault` planted, every reachable state; the names of the
/// properties it breaks, with a counterexample each.
pub(crate) fn check(fault: Fault) -> Vec<(&'static str, String)> {
    let first = std::env::var("MODEL_FIRST").is_ok();
    let mut builder = Edge::new(&[fault])
        .checker()
        .threads(if first { 1 } else { 2 });
    if fault != Fault::None || first {
        builder = builder.finish_when(stateright::HasDiscoveries::AnyFailures);
    }
    let checker = builder.spawn_bfs().join();
    eprintln!(
        "{fault:?}: {} states ({} unique), depth {}",
        checker.state_count(),
        checker.unique_state_count(),
        checker.max_depth()
    );
    let mut broken: Vec<_> = checker
        .discoveries()
        .into_iter()
        .map(|(name, path)| (name, format!("{:?}", path.into_actions())))
        .collect();
    broken.sort();
    for (name, path) in &broken {
        eprintln!("{fault:?} breaks {name:?}: {path}");
    }
    broken
}

/// Runs `actions` from the initial state with `fault` planted; the properties broken
/// along the way (each named once, in the order first broken).
pub(crate) fn replay(faults: &[Fault], actions: &[A]) -> Vec<&'static str> {
    let model = Edge::new(faults);
    let properties = model.properties();
    let mut s = model.init_states().remove(0);
    let mut broken = Vec::new();
    for a in actions {
        let mut enabled = Vec::new();
        model.actions(&s, &mut enabled);
        assert!(enabled.contains(a), "{a:?} is not enabled in {s:#?}");
        s = model.next_state(&s, a.clone()).expect("a next state");
        for p in &properties {
            if !(p.condition)(&model, &s) && !broken.contains(&p.name) {
                broken.push(p.name);
            }
        }
    }
    broken
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Issue 26's scenario X as a path: granted, cancelled while the POST is held,
    /// the monitor polls before Ray sees the job, then the POST lands and Ray runs it.
    fn scenario() -> Vec<A> {
        vec![
            A::Grant,
            A::Cancel,
            A::Poll,
            A::Deliver(0),
            A::RayStart(0),
            A::Answer { zombie: false },
            A::Poll,
        ]
    }

    #[test]
    fn the_scenario_of_issue_26_keeps_every_property() {
        assert_eq!(replay(&[Fault::None], &scenario()), Vec::<&str>::new());
    }

    /// Today's code before issue 26 followed the submit in flight and had no sweep.
    #[test]
    fn the_scenario_of_issue_26_breaks_them_when_the_monitor_follows_the_submit() {
        let broken = replay(&[Fault::FollowInFlight, Fault::NoSweep], &scenario());
        assert!(
            broken.contains(&"after a poll every attempt alive in Ray is followed and counted"),
            "{broken:?}"
        );
    }

    #[test]
    fn the_protocol_at_the_ray_edge_keeps_every_property() {
        let broken = check(Fault::None);
        assert!(broken.is_empty(), "{broken:#?}");
    }

    #[test]
    fn the_model_catches_a_monitor_that_follows_a_submit_in_flight() {
        let broken = check(Fault::FollowInFlight);
        assert!(!broken.is_empty());
    }

    #[test]
    fn the_model_catches_an_acceptance_that_forgets_the_stop() {
        let broken = check(Fault::AcceptForgetsStop);
        assert!(
            broken
                .iter()
                .any(|(name, _)| name.contains("without a stop")),
            "{broken:#?}"
        );
    }

    #[test]
    fn the_model_catches_a_monitor_without_the_sweep() {
        let broken = check(Fault::NoSweep);
        assert!(
            broken.iter().any(|(name, _)| name.contains("after a poll")),
            "{broken:#?}"
        );
    }
}
