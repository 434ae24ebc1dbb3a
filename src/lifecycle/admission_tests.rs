//! The admission rows (issue 30, `lifecycle/admission.rs`): a pool job's table over
//! every status × event, its runner's reports (idempotent, fenced by attempt), the
//! lease, a cancel, and a property test that no sequence ever calls Ray.

use std::collections::BTreeMap;

use chrono::{DateTime, Duration, TimeZone, Utc};
use entity::JobStatus as S;
use proptest::prelude::*;
use uuid::Uuid;

use super::*;

fn id() -> Uuid {
    Uuid::from_u128(30)
}

fn t(s: i64) -> DateTime<Utc> {
    Utc.timestamp_opt(1_800_000_000 + s, 0).unwrap()
}

fn pool_job(status: S) -> JobFacts {
    JobFacts {
        status,
        attempt: 1,
        retiring_attempt: None,
        stop_reason: None,
        preempting: false,
        preemptions: 0,
        pool: true,
        // Leased until t(60); the lapse events below come at t(61).
        lease_until: matches!(status, S::Admitted | S::Running).then(|| t(60)),
    }
}

fn started() -> Event {
    Event::RunnerStarted {
        attempt: None,
        lease_until: t(120),
    }
}

fn finished(status: S) -> Event {
    Event::RunnerFinished {
        attempt: None,
        status,
        message: Some("exit 0".into()),
    }
}

fn lapsed(requeue: bool) -> Event {
    Event::LeaseLapsed {
        now: t(61),
        lease_s: 60,
        requeue,
    }
}

fn events() -> Vec<(&'static str, Event)> {
    vec![
        (
            "admitted",
            Event::Admitted {
                pool: "gw".into(),
                lease_until: t(60),
            },
        ),
        ("started", started()),
        (
            "heartbeat",
            Event::RunnerHeartbeat {
                attempt: None,
                lease_until: t(120),
            },
        ),
        ("finished_succeeded", finished(S::Succeeded)),
        ("finished_failed", finished(S::Failed)),
        ("released", Event::RunnerReleased { attempt: None }),
        ("lapsed_requeue", lapsed(true)),
        ("lapsed_fail", lapsed(false)),
        ("cancel", Event::CancelRequested),
        ("withdraw", Event::WithdrawQueued),
        (
            "seen_running",
            Event::SeenRunning {
                started_at: Some(t(1)),
            },
        ),
        (
            "missing",
            Event::Missing {
                cluster: "gw".into(),
                for_s: 600,
            },
        ),
        (
            "preempt",
            Event::Preempt {
                for_job: Uuid::nil(),
                for_user: "b".into(),
                lost_core_seconds: 1.0,
            },
        ),
        ("grace_over", Event::PreemptionGraceOver { grace_s: 30 }),
    ]
}

/// The expected status after each (status, event) for a pool job with no stop asked;
/// "refused" is a 409 (or a refused cancel), "quiet" a lease renewal; every pair not
/// listed is ignored.
fn expected() -> BTreeMap<(&'static str, &'static str), Result<S, &'static str>> {
    use S::*;
    let mut table: BTreeMap<_, _> = [
        (("QUEUED", "admitted"), Ok(Admitted)),
        (("QUEUED", "cancel"), Ok(Stopped)),
        (("QUEUED", "withdraw"), Ok(Stopped)),
        (("ADMITTED", "started"), Ok(Running)),
        (("ADMITTED", "heartbeat"), Err("quiet")),
        (("ADMITTED", "finished_succeeded"), Ok(Succeeded)),
        (("ADMITTED", "finished_failed"), Ok(Failed)),
        (("ADMITTED", "released"), Ok(Queued)),
        (("ADMITTED", "lapsed_requeue"), Ok(Queued)),
        (("ADMITTED", "lapsed_fail"), Ok(Failed)),
        (("ADMITTED", "cancel"), Ok(Admitted)),
        (("ADMITTED", "preempt"), Ok(Admitted)),
        (("ADMITTED", "withdraw"), Err("refused")),
        (("RUNNING", "started"), Err("quiet")),
        (("RUNNING", "heartbeat"), Err("quiet")),
        (("RUNNING", "finished_succeeded"), Ok(Succeeded)),
        (("RUNNING", "finished_failed"), Ok(Failed)),
        (("RUNNING", "released"), Err("refused")),
        (("RUNNING", "lapsed_requeue"), Ok(Queued)),
        (("RUNNING", "lapsed_fail"), Ok(Failed)),
        (("RUNNING", "cancel"), Ok(Running)),
        (("RUNNING", "preempt"), Ok(Running)),
        (("RUNNING", "withdraw"), Err("refused")),
        // A retried finished with the status the job ended with is ignored (200).
        (("FAILED", "finished_succeeded"), Err("refused")),
        (("STOPPED", "finished_succeeded"), Err("refused")),
        (("SUCCEEDED", "finished_failed"), Err("refused")),
    ]
    .into_iter()
    .collect();
    for s in ["QUEUED", "SUCCEEDED", "FAILED", "STOPPED"] {
        for e in ["started", "heartbeat"] {
            table.insert((s, e), Err("refused"));
        }
    }
    // A release of a job that ended: that admission is over, as asked (200, ignored).
    table.insert(("QUEUED", "released"), Err("refused"));
    table.insert(("QUEUED", "finished_succeeded"), Err("refused"));
    table.insert(("QUEUED", "finished_failed"), Err("refused"));
    for s in ["SUCCEEDED", "FAILED", "STOPPED"] {
        table.insert((s, "cancel"), Err("refused"));
    }
    table
}

#[test]
fn a_pool_job_follows_the_admission_table_for_every_status_and_event() {
    let table = expected();
    // DISPATCHING and PENDING are Ray's: a pool job never has them (nothing writes
    // them for it), so the general table (tests.rs) is theirs.
    for status in S::ALL
        .into_iter()
        .filter(|s| !matches!(s, S::Dispatching | S::Pending))
    {
        for (name, event) in events() {
            let got = decide(id(), &pool_job(status), &event);
            let want = table.get(&(status.as_str(), name));
            match (want, &got) {
                (Some(Ok(to)), Decision::Step(s)) if !s.changes.quiet => {
                    assert_eq!(s.to, *to, "{status} + {name}");
                    assert_eq!(
                        s.ray, None,
                        "{status} + {name}: a pool job never goes to Ray"
                    );
                }
                (Some(Err("quiet")), Decision::Step(s)) if s.changes.quiet => {
                    assert_eq!(s.to, status, "{status} + {name}");
                    assert_eq!(s.changes.lease_until, Some(Some(t(120))));
                }
                (Some(Err("refused")), Decision::Refuse(_)) => {}
                (None, Decision::Ignore) => {}
                _ => panic!("{status} + {name}: expected {want:?}, got {got:?}"),
            }
        }
    }
    // Not a pool job: a runner's reports are refused; DISPATCHING/PENDING/... are the
    // general table's (tests.rs).
    let mut ray_job = pool_job(S::Running);
    ray_job.pool = false;
    assert_eq!(
        decide(id(), &ray_job, &started()),
        Decision::Refuse(Refusal::NotAPoolJob)
    );
}

/// A pool job whose preemption's stop is under way (its runner was asked to stop it).
fn preempting(status: S) -> JobFacts {
    JobFacts {
        stop_reason: Some(crate::lifecycle::preempted_for(Uuid::nil(), "b")),
        preempting: true,
        ..pool_job(status)
    }
}

/// The rows of a preempting pool job: every way its admission ends short of success
/// puts it back in the queue as the next attempt, preempted once more, with no lease
/// (never STOPPED, never FAILED, whatever `on_lease_lapse` says); a success is kept; a
/// cancel replaces the preemption's stop (the job then ends STOPPED); a second
/// preemption is declined (ignored: a stop is asked already).
#[test]
fn a_preempted_pool_job_goes_back_to_the_queue_however_its_admission_ends() {
    use S::*;
    let want: BTreeMap<(&str, &str), Result<S, &str>> = [
        (("ADMITTED", "started"), Ok(Running)),
        (("ADMITTED", "heartbeat"), Err("quiet")),
        (("ADMITTED", "finished_succeeded"), Ok(Succeeded)),
        (("ADMITTED", "finished_failed"), Ok(Queued)),
        (("ADMITTED", "released"), Ok(Queued)),
        (("ADMITTED", "lapsed_requeue"), Ok(Queued)),
        (("ADMITTED", "lapsed_fail"), Ok(Queued)),
        (("ADMITTED", "grace_over"), Ok(Queued)),
        (("ADMITTED", "cancel"), Ok(Admitted)),
        (("ADMITTED", "withdraw"), Err("refused")),
        (("RUNNING", "started"), Err("quiet")),
        (("RUNNING", "heartbeat"), Err("quiet")),
        (("RUNNING", "finished_succeeded"), Ok(Succeeded)),
        (("RUNNING", "finished_failed"), Ok(Queued)),
        (("RUNNING", "released"), Err("refused")),
        (("RUNNING", "lapsed_requeue"), Ok(Queued)),
        (("RUNNING", "lapsed_fail"), Ok(Queued)),
        (("RUNNING", "grace_over"), Ok(Queued)),
        (("RUNNING", "cancel"), Ok(Running)),
        (("RUNNING", "withdraw"), Err("refused")),
    ]
    .into_iter()
    .collect();
    for status in [Admitted, Running] {
        let facts = preempting(status);
        for (name, event) in events() {
            let got = decide(id(), &facts, &event);
            match (want.get(&(status.as_str(), name)), &got) {
                (Some(Ok(to)), Decision::Step(s)) if !s.changes.quiet => {
                    assert_eq!(s.to, *to, "{status} + {name}");
                    assert_eq!(s.ray, None, "{status} + {name}");
                    if *to == Queued {
                        assert_eq!(s.changes.attempt, Some(2), "{name}");
                        assert_eq!(s.changes.preemptions, Some(1), "{name}");
                        assert_eq!(s.changes.lease_until, Some(None), "{name}");
                        assert_eq!(s.changes.stop_reason, Some(None), "{name}");
                        assert_eq!(s.changes.retiring_attempt, None, "{name}");
                    }
                    if name == "cancel" {
                        assert_eq!(s.changes.stop_reason, Some(Some(CANCELLED.into())));
                    }
                }
                (Some(Err("quiet")), Decision::Step(s)) if s.changes.quiet => {}
                (Some(Err("refused")), Decision::Refuse(_)) => {}
                (None, Decision::Ignore) => {}
                (w, _) => panic!("{status} + {name}: expected {w:?}, got {got:?}"),
            }
        }
    }
    // The preemption's step: the stop asked, `preempted_at` set, an event row whose
    // detail makes it `job.preempted`; nothing for Ray.
    let s = step(decide(
        id(),
        &pool_job(Running),
        &events()
            .into_iter()
            .find(|(n, _)| *n == "preempt")
            .unwrap()
            .1,
    ));
    assert_eq!(s.changes.preempted, Some(true));
    assert!(
        s.detail.starts_with(crate::lifecycle::PREEMPTED_DETAIL),
        "{}",
        s.detail
    );
    assert_eq!(s.ray, None);
}

fn step(d: Decision) -> Step {
    match d {
        Decision::Step(s) => s,
        other => panic!("expected a step, got {other:?}"),
    }
}

#[test]
fn admission_books_the_pool_and_a_lease_and_started_renews_it() {
    let s = step(decide(
        id(),
        &pool_job(S::Queued),
        &Event::Admitted {
            pool: "gw".into(),
            lease_until: t(60),
        },
    ));
    assert_eq!(s.to, S::Admitted);
    assert_eq!(s.changes.cluster, Some(Some("gw".into())));
    assert_eq!(s.changes.dispatched_now, Some(true));
    assert_eq!(s.changes.lease_until, Some(Some(t(60))));
    assert!(
        s.detail.contains("admitted to pool gw (attempt 1)"),
        "{}",
        s.detail
    );
    assert!(!s.changes.quiet, "an admission is announced");
    let s = step(decide(id(), &pool_job(S::Admitted), &started()));
    assert_eq!(s.to, S::Running);
    assert_eq!(s.changes.lease_until, Some(Some(t(120))));
    assert!(!s.changes.quiet);
}

#[test]
fn a_finished_report_ends_the_job_once_and_a_retry_of_it_changes_nothing() {
    let s = step(decide(id(), &pool_job(S::Running), &finished(S::Succeeded)));
    assert_eq!(s.to, S::Succeeded);
    assert_eq!(s.changes.message.as_deref(), Some("exit 0"));
    assert_eq!(s.changes.lease_until, Some(None));
    assert_eq!(s.metric, Some(Metric::Finished(S::Succeeded)));
    // The same report again: nothing to write (the API answers 200).
    assert_eq!(
        decide(id(), &pool_job(S::Succeeded), &finished(S::Succeeded)),
        Decision::Ignore
    );
    // Another outcome for an ended job: 409 naming what it is.
    match decide(id(), &pool_job(S::Succeeded), &finished(S::Failed)) {
        Decision::Refuse(Refusal::ReportConflict { status, why, .. }) => {
            assert_eq!(status, S::Succeeded);
            assert!(why.contains("SUCCEEDED"), "{why}");
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_lapsed_lease_requeues_as_the_next_attempt_and_a_late_finished_is_refused() {
    let f = pool_job(S::Running);
    // Not yet lapsed (renewed meanwhile): nothing.
    let early = Event::LeaseLapsed {
        now: t(59),
        lease_s: 60,
        requeue: true,
    };
    assert_eq!(decide(id(), &f, &early), Decision::Ignore);
    let s = step(decide(id(), &f, &lapsed(true)));
    assert_eq!(s.to, S::Queued);
    assert_eq!(s.changes.attempt, Some(2));
    assert_eq!(s.changes.cluster, Some(None));
    assert_eq!(s.changes.lease_until, Some(None));
    assert!(s.changes.clear_started);
    assert!(s.detail.contains("lease lapsed"), "{}", s.detail);
    assert!(s.detail.contains("attempt 2"), "{}", s.detail);
    // The job is QUEUED as attempt 2 now: the old runner's finished is a conflict,
    // with or without its attempt.
    let mut requeued = pool_job(S::Queued);
    requeued.attempt = 2;
    assert!(matches!(
        decide(id(), &requeued, &finished(S::Succeeded)),
        Decision::Refuse(Refusal::ReportConflict {
            status: S::Queued,
            attempt: 2,
            ..
        })
    ));
    // Readmitted as attempt 2: a report naming attempt 1 is still refused ...
    let mut readmitted = pool_job(S::Admitted);
    readmitted.attempt = 2;
    let old = Event::RunnerFinished {
        attempt: Some(1),
        status: S::Succeeded,
        message: None,
    };
    assert!(matches!(
        decide(id(), &readmitted, &old),
        Decision::Refuse(Refusal::ReportConflict { .. })
    ));
    // ... except a release of it, which is over already.
    assert_eq!(
        decide(
            id(),
            &readmitted,
            &Event::RunnerReleased { attempt: Some(1) }
        ),
        Decision::Ignore
    );
    // on_lease_lapse = "fail".
    let s = step(decide(id(), &f, &lapsed(false)));
    assert_eq!(s.to, S::Failed);
    assert!(s.changes.message.unwrap().contains("lease lapsed"));
}

#[test]
fn a_release_puts_the_job_back_at_its_place_as_the_next_attempt() {
    let s = step(decide(
        id(),
        &pool_job(S::Admitted),
        &Event::RunnerReleased { attempt: Some(1) },
    ));
    assert_eq!(s.to, S::Queued);
    assert_eq!(s.changes.attempt, Some(2));
    assert_eq!(s.changes.dispatched_now, Some(false));
    assert_eq!(s.changes.cluster, Some(None));
}

#[test]
fn a_cancel_of_an_admitted_or_running_pool_job_asks_its_runner_and_ends_on_finished() {
    for status in [S::Admitted, S::Running] {
        let f = pool_job(status);
        let s = step(decide(id(), &f, &Event::CancelRequested));
        assert_eq!(s.to, status);
        assert_eq!(s.ray, None, "no Ray call for a pool job");
        assert!(s.detail.starts_with(STOP_REQUESTED_DETAIL), "{}", s.detail);
        assert_eq!(s.changes.stop_reason, Some(Some(CANCELLED.into())));
        let mut asked = f.clone();
        asked.stop_reason = Some(CANCELLED.into());
        // Asked again: nothing more.
        assert_eq!(
            decide(id(), &asked, &Event::CancelRequested),
            Decision::Ignore
        );
        // The runner stopped it: STOPPED, whatever it calls the end.
        for said in [S::Stopped, S::Failed] {
            let s = step(decide(id(), &asked, &finished(said)));
            assert_eq!(s.to, S::Stopped, "{status}, runner said {said}");
            assert_eq!(s.changes.stop_reason, Some(None));
        }
        // A lease that lapses while stopping: STOPPED, not queued again.
        assert_eq!(step(decide(id(), &asked, &lapsed(true))).to, S::Stopped);
    }
    // Released after the cancel: STOPPED too.
    let mut asked = pool_job(S::Admitted);
    asked.stop_reason = Some(CANCELLED.into());
    assert_eq!(
        step(decide(
            id(),
            &asked,
            &Event::RunnerReleased { attempt: None }
        ))
        .to,
        S::Stopped
    );
}

/// Mirrors what `store::apply` writes, for the columns the admission rows use
/// (`preempted_at`: whether the row's `preempted_at` is set), and [`JobFacts::of`].
fn apply(f: &mut JobFacts, preempted_at: &mut bool, s: &Step) {
    f.status = s.to;
    if let Some(a) = s.changes.attempt {
        f.attempt = a;
    }
    if let Some(r) = &s.changes.stop_reason {
        f.stop_reason = r.clone();
    }
    if let Some(l) = s.changes.lease_until {
        f.lease_until = l;
    }
    if let Some(n) = s.changes.preemptions {
        f.preemptions = n;
    }
    if let Some(p) = s.changes.preempted {
        *preempted_at = p;
    }
    f.preempting =
        *preempted_at && f.stop_reason.is_some() && f.stop_reason.as_deref() != Some(CANCELLED);
}

fn any_event() -> impl Strategy<Value = Event> {
    let status = prop_oneof![Just(S::Succeeded), Just(S::Failed), Just(S::Stopped)];
    let attempt = proptest::option::of(1u32..4);
    prop_oneof![
        (0i64..200).prop_map(|l| Event::Admitted {
            pool: "gw".into(),
            lease_until: t(l)
        }),
        (attempt.clone(), 0i64..200).prop_map(|(attempt, l)| Event::RunnerStarted {
            attempt,
            lease_until: t(l)
        }),
        (attempt.clone(), 0i64..200).prop_map(|(attempt, l)| Event::RunnerHeartbeat {
            attempt,
            lease_until: t(l)
        }),
        (attempt.clone(), status).prop_map(|(attempt, status)| Event::RunnerFinished {
            attempt,
            status,
            message: None
        }),
        attempt.prop_map(|attempt| Event::RunnerReleased { attempt }),
        (0i64..200, any::<bool>()).prop_map(|(n, requeue)| Event::LeaseLapsed {
            now: t(n),
            lease_s: 60,
            requeue
        }),
        Just(Event::CancelRequested),
        Just(Event::Preempt {
            for_job: Uuid::nil(),
            for_user: "b".into(),
            lost_core_seconds: 1.0,
        }),
        Just(Event::PreemptionGraceOver { grace_s: 30 }),
    ]
}

proptest! {
    /// Whatever a runner, the lease check, cancels and preemptions do, in any order:
    /// Ray is never called, a terminal status never changes, the attempt never goes
    /// down, a job asked to stop goes back to the queue only when the stop was a
    /// preemption's (and then preempted once more, with no stop left asked), a job
    /// cancelled never does, and only a step that is announced (a row in
    /// `job_events`) changes the status.
    #[test]
    fn no_sequence_of_reports_sends_a_pool_job_to_ray_or_revives_it(
        events in proptest::collection::vec(any_event(), 1..40)
    ) {
        let mut f = pool_job(S::Queued);
        let mut preempted_at = false;
        for e in &events {
            let before = f.clone();
            match decide(id(), &f, e) {
                Decision::Step(s) => {
                    prop_assert!(s.ray.is_none(), "{e:?} on {before:?}");
                    prop_assert!(!before.status.is_terminal(), "{e:?} moved an ended job");
                    if s.changes.quiet {
                        prop_assert_eq!(s.to, before.status);
                    }
                    if s.to == S::Queued && before.status != S::Queued {
                        prop_assert!(
                            before.stop_reason.is_none() || before.preempting,
                            "a cancelled job requeued: {e:?} on {before:?}"
                        );
                        if before.preempting {
                            prop_assert_eq!(s.changes.preemptions, Some(before.preemptions + 1));
                        }
                    }
                    apply(&mut f, &mut preempted_at, &s);
                    if f.status == S::Queued {
                        prop_assert!(f.stop_reason.is_none() && !f.preempting, "{f:?}");
                    }
                    prop_assert!(f.attempt >= before.attempt);
                }
                Decision::Ignore | Decision::Refuse(_) => {}
            }
        }
    }
}

#[test]
fn a_lease_renewal_is_quiet_and_a_heartbeat_needs_no_body_time() {
    let s = step(decide(
        id(),
        &pool_job(S::Running),
        &Event::RunnerHeartbeat {
            attempt: Some(1),
            lease_until: t(61) + Duration::seconds(60),
        },
    ));
    assert!(s.changes.quiet);
    assert_eq!(s.changes.lease_until, Some(Some(t(121))));
}
