//! The lifecycle table, checked row by row over every status × event, and property
//! tests over random event sequences driven by a model of Ray.

use std::collections::BTreeMap;

use entity::JobStatus as S;
use proptest::prelude::*;
use uuid::Uuid;

use super::*;

fn id() -> Uuid {
    Uuid::from_u128(7)
}

fn facts(status: S) -> JobFacts {
    JobFacts {
        status,
        attempt: 1,
        retiring_attempt: None,
        stop_reason: None,
        preempting: false,
        preemptions: 0,
        pool: false,
        lease_until: None,
    }
}

fn preempt() -> Event {
    Event::Preempt {
        for_job: Uuid::nil(),
        for_user: "b".into(),
        lost_core_seconds: 120.0,
    }
}

fn events() -> Vec<(&'static str, Event)> {
    vec![
        (
            "granted",
            Event::Granted {
                cluster: "c".into(),
            },
        ),
        (
            "accepted",
            Event::RayAccepted {
                already_existed: false,
                attempts: 1,
            },
        ),
        (
            "refused",
            Event::RayRefused {
                message: "bad".into(),
            },
        ),
        (
            "not_ready",
            Event::RayNotReady {
                reason: "404".into(),
            },
        ),
        ("seen_pending", Event::SeenPending),
        ("seen_running", Event::SeenRunning { started_at: None }),
        (
            "seen_succeeded",
            Event::SeenFinished {
                status: S::Succeeded,
                message: None,
                started_at: None,
                finished_at: None,
            },
        ),
        (
            "missing",
            Event::Missing {
                cluster: "c".into(),
                for_s: 60,
            },
        ),
        (
            "pending_too_long",
            Event::PendingTooLong {
                waited_s: 61,
                scale_up: false,
            },
        ),
        ("runtime_exceeded", Event::RuntimeExceeded { limit_s: 5 }),
        ("cancel", Event::CancelRequested),
        ("withdraw", Event::WithdrawQueued),
        (
            "retired_ended",
            Event::RetiredAttemptEnded { status: S::Stopped },
        ),
        ("retired_gone", Event::RetiredAttemptGone),
        (
            "cluster_removed",
            Event::ClusterRemoved {
                cluster: "c".into(),
            },
        ),
        (
            "stray_found",
            Event::StrayFound {
                attempt: 1,
                cluster: "c".into(),
            },
        ),
        ("preempt", preempt()),
        ("grace_over", Event::PreemptionGraceOver { grace_s: 30 }),
    ]
}

/// The expected status after each (status, event) of the table for a job with no
/// stop asked and no retiring attempt; every pair not listed is ignored.
fn expected() -> BTreeMap<(&'static str, &'static str), Result<S, &'static str>> {
    use S::*;
    [
        (("QUEUED", "granted"), Ok(Dispatching)),
        (("QUEUED", "cancel"), Ok(Stopped)),
        (("DISPATCHING", "accepted"), Ok(Pending)),
        (("DISPATCHING", "refused"), Ok(Failed)),
        (("DISPATCHING", "not_ready"), Ok(Queued)),
        (("DISPATCHING", "seen_pending"), Ok(Pending)),
        (("DISPATCHING", "seen_running"), Ok(Running)),
        (("DISPATCHING", "seen_succeeded"), Ok(Succeeded)),
        (("DISPATCHING", "missing"), Ok(Queued)),
        (("DISPATCHING", "cancel"), Ok(Dispatching)),
        (("DISPATCHING", "cluster_removed"), Ok(Queued)),
        (("PENDING", "seen_running"), Ok(Running)),
        (("PENDING", "seen_succeeded"), Ok(Succeeded)),
        (("PENDING", "missing"), Ok(Failed)),
        (("PENDING", "pending_too_long"), Ok(Queued)),
        (("PENDING", "cancel"), Ok(Pending)),
        (("PENDING", "cluster_removed"), Ok(Failed)),
        (("RUNNING", "seen_succeeded"), Ok(Succeeded)),
        (("RUNNING", "missing"), Ok(Failed)),
        (("RUNNING", "runtime_exceeded"), Ok(Running)),
        (("RUNNING", "cancel"), Ok(Running)),
        (("RUNNING", "cluster_removed"), Ok(Failed)),
        (("SUCCEEDED", "cancel"), Err("refused")),
        (("FAILED", "cancel"), Err("refused")),
        (("STOPPED", "cancel"), Err("refused")),
        // Ray's DELETE of a job seen QUEUED: stops it only while it is still QUEUED; a
        // job granted in between is refused untouched (tester finding, issue 11 round 2).
        (("QUEUED", "withdraw"), Ok(Stopped)),
        (("DISPATCHING", "withdraw"), Err("refused")),
        (("PENDING", "withdraw"), Err("refused")),
        (("RUNNING", "withdraw"), Err("refused")),
        // The sweep found the current attempt alive in Ray while queued (issue 26).
        (("QUEUED", "stray_found"), Ok(Queued)),
        // Preemption (issue 28): the stop is asked, the job keeps its status until Ray
        // says the attempt ended; a job Ray does not run yet (DISPATCHING) is left.
        (("PENDING", "preempt"), Ok(Pending)),
        (("RUNNING", "preempt"), Ok(Running)),
    ]
    .into_iter()
    .collect()
}

#[test]
fn every_status_and_event_follows_the_table() {
    let table = expected();
    for status in S::ALL {
        for (name, event) in events() {
            let got = decide(id(), &facts(status), &event);
            let want = table.get(&(status.as_str(), name));
            match (want, &got) {
                (Some(Ok(to)), Decision::Step(s)) => assert_eq!(s.to, *to, "{status} + {name}"),
                (Some(Err(_)), Decision::Refuse(_)) => {}
                (None, Decision::Ignore) => {}
                _ => panic!("{status} + {name}: expected {want:?}, got {got:?}"),
            }
        }
    }
}

#[test]
fn a_grant_submits_the_current_attempt_under_its_own_id() {
    let mut f = facts(S::Queued);
    f.attempt = 3;
    let Decision::Step(s) = decide(
        id(),
        &f,
        &Event::Granted {
            cluster: "c".into(),
        },
    ) else {
        panic!("not a step")
    };
    assert_eq!(
        s.ray,
        Some(RayCall::Submit {
            submission_id: format!("{}-3", id())
        })
    );
    assert_eq!(s.changes.cluster, Some(Some("c".into())));
}

#[test]
fn a_job_with_a_retiring_attempt_is_not_granted() {
    let mut f = facts(S::Queued);
    f.attempt = 2;
    f.retiring_attempt = Some(1);
    let got = decide(
        id(),
        &f,
        &Event::Granted {
            cluster: "c".into(),
        },
    );
    assert_eq!(got, Decision::Refuse(Refusal::PreviousAttemptNotStopped(1)));
}

#[test]
fn pending_too_long_queues_a_new_attempt_and_stops_the_old_one() {
    let Decision::Step(s) = decide(
        id(),
        &facts(S::Pending),
        &Event::PendingTooLong {
            waited_s: 61,
            scale_up: false,
        },
    ) else {
        panic!("not a step")
    };
    assert_eq!(s.to, S::Queued);
    assert_eq!(s.changes.attempt, Some(2));
    assert_eq!(s.changes.retiring_attempt, Some(Some(1)));
    assert_eq!(
        s.ray,
        Some(RayCall::Stop {
            submission_id: id().to_string()
        })
    );
    assert_eq!(s.metric, Some(Metric::PendingTimeout));
    assert!(s.changes.message.unwrap().contains("61 s"));
}

#[test]
fn a_retired_attempt_that_succeeded_finishes_the_job_instead_of_running_it_again() {
    let mut f = facts(S::Queued);
    f.attempt = 2;
    f.retiring_attempt = Some(1);
    let Decision::Step(s) = decide(
        id(),
        &f,
        &Event::RetiredAttemptEnded {
            status: S::Succeeded,
        },
    ) else {
        panic!("not a step")
    };
    assert_eq!(s.to, S::Succeeded);
    let Decision::Step(s) = decide(id(), &f, &Event::RetiredAttemptGone) else {
        panic!()
    };
    assert_eq!((s.to, s.changes.retiring_attempt), (S::Queued, Some(None)));
}

#[test]
fn a_cancel_while_dispatching_is_carried_out_when_ray_answers() {
    let mut f = facts(S::Dispatching);
    f.stop_reason = Some("cancelled by request".into());
    let Decision::Step(s) = decide(
        id(),
        &f,
        &Event::RayAccepted {
            already_existed: false,
            attempts: 1,
        },
    ) else {
        panic!()
    };
    assert_eq!((s.to, s.ray.is_some()), (S::Pending, true));
    let Decision::Step(s) = decide(id(), &f, &Event::RayNotReady { reason: "x".into() }) else {
        panic!()
    };
    assert_eq!(s.to, S::Stopped);
    let Decision::Step(s) = decide(
        id(),
        &f,
        &Event::SeenFinished {
            status: S::Stopped,
            message: Some("ray".into()),
            started_at: None,
            finished_at: None,
        },
    ) else {
        panic!()
    };
    assert_eq!(s.changes.message.as_deref(), Some("cancelled by request"));
}

#[test]
fn a_cancel_while_dispatching_ends_stopped_wherever_ray_does_not_have_the_job() {
    let mut f = facts(S::Dispatching);
    f.stop_reason = Some("cancelled by request".into());
    let cluster = || "c".to_string();
    for event in [
        Event::RayRefused {
            message: "bad field".into(),
        },
        Event::RayNotReady { reason: "x".into() },
        Event::Missing {
            cluster: cluster(),
            for_s: 0,
        },
        Event::ClusterRemoved { cluster: cluster() },
    ] {
        let Decision::Step(s) = decide(id(), &f, &event) else {
            panic!("{event:?}: not a step")
        };
        assert_eq!(s.to, S::Stopped, "{event:?}");
        assert!(
            s.changes
                .message
                .as_deref()
                .is_some_and(|m| m.starts_with("cancelled by request")),
            "{event:?}: {:?}",
            s.changes.message
        );
        assert_eq!(s.metric, Some(Metric::Finished(S::Stopped)));
    }
    // Wherever Ray has it, the stop goes with the step.
    let stop = Some(RayCall::Stop {
        submission_id: id().to_string(),
    });
    for event in [
        Event::SeenPending,
        Event::SeenRunning { started_at: None },
        Event::RayAccepted {
            already_existed: true,
            attempts: 2,
        },
    ] {
        let Decision::Step(s) = decide(id(), &f, &event) else {
            panic!("{event:?}: not a step")
        };
        assert_eq!(s.ray, stop, "{event:?}");
    }
    // The cancel itself sends a stop at once (a 404 while Ray does not have it yet).
    let Decision::Step(s) = decide(id(), &facts(S::Dispatching), &Event::CancelRequested) else {
        panic!()
    };
    assert_eq!((s.to, s.ray), (S::Dispatching, stop));
}

/// A second cancel of a job being stopped for a cancel writes nothing, sends no
/// second stop and announces nothing (a fresh tester's finding: 20 cancels of a
/// DISPATCHING job wrote 20 events and sent Ray 21 stops); a cancel of a job being
/// stopped for another reason still records the cancel, once.
#[test]
fn a_cancel_asked_again_changes_nothing() {
    for status in [S::Dispatching, S::Pending, S::Running] {
        let mut f = facts(status);
        let Decision::Step(first) = decide(id(), &f, &Event::CancelRequested) else {
            panic!("{status:?}: the first cancel is a step")
        };
        f.stop_reason = first.changes.stop_reason.clone().flatten();
        assert_eq!(f.stop_reason.as_deref(), Some(CANCELLED));
        assert_eq!(
            decide(id(), &f, &Event::CancelRequested),
            Decision::Ignore,
            "{status:?}"
        );
        f.stop_reason = Some("runtime limit of 60 s exceeded".into());
        let Decision::Step(s) = decide(id(), &f, &Event::CancelRequested) else {
            panic!("{status:?}: a cancel after another stop is recorded")
        };
        assert_eq!(s.changes.stop_reason, Some(Some(CANCELLED.into())));
    }
}

#[test]
fn a_job_whose_stop_was_asked_and_that_ray_reports_failed_is_stopped() {
    let mut f = facts(S::Running);
    f.stop_reason = Some("cancelled by request".into());
    let failed = Event::SeenFinished {
        status: S::Failed,
        message: Some("JOB_ENTRYPOINT_COMMAND_ERROR: exit -15".into()),
        started_at: None,
        finished_at: None,
    };
    let Decision::Step(s) = decide(id(), &f, &failed) else {
        panic!()
    };
    assert_eq!(s.to, S::Stopped);
    assert_eq!(s.metric, Some(Metric::Finished(S::Stopped)));
    assert_eq!(
        s.changes.message.as_deref(),
        Some("cancelled by request (Ray reported FAILED: JOB_ENTRYPOINT_COMMAND_ERROR: exit -15)")
    );
    // Without a stop asked, FAILED stays FAILED.
    let Decision::Step(s) = decide(id(), &facts(S::Running), &failed) else {
        panic!()
    };
    assert_eq!(s.to, S::Failed);
}

#[test]
fn a_stray_found_while_queued_moves_the_job_to_its_next_attempt() {
    let found = |attempt| Event::StrayFound {
        attempt,
        cluster: "c2".into(),
    };
    let mut f = facts(S::Queued);
    f.attempt = 2;
    let Decision::Step(s) = decide(id(), &f, &found(2)) else {
        panic!()
    };
    assert_eq!(s.to, S::Queued);
    assert_eq!(s.changes.attempt, Some(3));
    assert_eq!(s.changes.retiring_attempt, Some(Some(2)));
    assert_eq!(s.changes.cluster, Some(Some("c2".into())));
    assert_eq!(
        s.ray,
        Some(RayCall::Stop {
            submission_id: format!("{}-2", id())
        })
    );
    // Not the current attempt, or a retiring one already: nothing to write.
    assert_eq!(decide(id(), &f, &found(1)), Decision::Ignore);
    f.retiring_attempt = Some(1);
    assert_eq!(decide(id(), &f, &found(2)), Decision::Ignore);
}

/// Facts after `step` (what `store::apply` writes and `JobFacts::of` reads back).
fn after(mut f: JobFacts, s: &Step) -> JobFacts {
    apply(&mut f, s);
    f
}

fn step_of(d: Decision) -> Step {
    match d {
        Decision::Step(s) => s,
        other => panic!("expected a step, got {other:?}"),
    }
}

#[test]
fn a_preempted_job_is_stopped_then_queued_again_with_its_next_attempt() {
    let running = facts(S::Running);
    let s = step_of(decide(id(), &running, &preempt()));
    assert_eq!(s.to, S::Running);
    assert!(s.detail.starts_with(PREEMPTED_DETAIL), "{}", s.detail);
    assert!(s.detail.contains("core-seconds lost: 120"), "{}", s.detail);
    assert_eq!(s.changes.preempted, Some(true));
    assert_eq!(
        s.ray,
        Some(RayCall::Stop {
            submission_id: submission_id(id(), 1)
        })
    );
    let preempting = after(running, &s);
    assert!(preempting.preempting);
    // Preempted again while its stop is under way: nothing more.
    assert_eq!(decide(id(), &preempting, &preempt()), Decision::Ignore);
    for ended in [S::Stopped, S::Failed] {
        let seen = Event::SeenFinished {
            status: ended,
            message: None,
            started_at: None,
            finished_at: None,
        };
        let q = step_of(decide(id(), &preempting, &seen));
        assert_eq!(q.to, S::Queued);
        assert_eq!(q.changes.attempt, Some(2));
        assert_eq!(q.changes.preemptions, Some(1));
        assert_eq!(q.changes.retiring_attempt, None, "Ray said it ended");
        assert_eq!(q.changes.cluster, Some(None));
        assert!(q.changes.clear_started);
        assert_eq!(q.changes.preempted, Some(false));
        assert!(q
            .changes
            .message
            .as_deref()
            .unwrap()
            .contains("preempted for job"));
        assert_eq!(q.ray, None);
        let queued = after(preempting.clone(), &q);
        assert!(!queued.preempting && queued.stop_reason.is_none());
        assert!(matches!(
            decide(
                id(),
                &queued,
                &Event::Granted {
                    cluster: "c".into()
                }
            ),
            Decision::Step(_)
        ));
    }
}

#[test]
fn a_preempted_attempt_that_succeeded_before_its_stop_landed_is_succeeded() {
    let preempting = after(
        facts(S::Running),
        &step_of(decide(id(), &facts(S::Running), &preempt())),
    );
    let seen = Event::SeenFinished {
        status: S::Succeeded,
        message: None,
        started_at: None,
        finished_at: None,
    };
    let s = step_of(decide(id(), &preempting, &seen));
    assert_eq!(s.to, S::Succeeded);
    assert_eq!(s.changes.preempted, Some(false));
}

#[test]
fn a_cancel_during_a_preemption_ends_the_job_stopped() {
    let preempting = after(
        facts(S::Running),
        &step_of(decide(id(), &facts(S::Running), &preempt())),
    );
    let c = step_of(decide(id(), &preempting, &Event::CancelRequested));
    assert_eq!(c.to, S::Running);
    let cancelled = after(preempting, &c);
    assert!(!cancelled.preempting, "the cancel wins");
    for ended in [S::Stopped, S::Failed] {
        let seen = Event::SeenFinished {
            status: ended,
            message: None,
            started_at: None,
            finished_at: None,
        };
        assert_eq!(step_of(decide(id(), &cancelled, &seen)).to, S::Stopped);
    }
    assert_eq!(
        decide(
            id(),
            &cancelled,
            &Event::PreemptionGraceOver { grace_s: 30 }
        ),
        Decision::Ignore
    );
}

#[test]
fn a_preemption_ray_does_not_confirm_within_the_grace_queues_the_job_held() {
    let preempting = after(
        facts(S::Running),
        &step_of(decide(id(), &facts(S::Running), &preempt())),
    );
    let s = step_of(decide(
        id(),
        &preempting,
        &Event::PreemptionGraceOver { grace_s: 30 },
    ));
    assert_eq!(s.to, S::Queued);
    assert_eq!(s.changes.attempt, Some(2));
    assert_eq!(s.changes.retiring_attempt, Some(Some(1)));
    assert_eq!(s.changes.cluster, None, "it names where attempt 1 still is");
    let held = after(preempting, &s);
    assert!(matches!(
        decide(
            id(),
            &held,
            &Event::Granted {
                cluster: "c".into()
            }
        ),
        Decision::Refuse(Refusal::PreviousAttemptNotStopped(1))
    ));
    // If that attempt turns out to have finished the work, the job is SUCCEEDED.
    let done = decide(
        id(),
        &held,
        &Event::RetiredAttemptEnded {
            status: S::Succeeded,
        },
    );
    assert_eq!(step_of(done).to, S::Succeeded);
}

#[test]
fn submission_ids_round_trip() {
    for attempt in [1, 2, 17] {
        assert_eq!(
            parse_submission_id(&submission_id(id(), attempt)),
            Some((id(), attempt))
        );
    }
    assert_eq!(parse_submission_id("raysubmit_abc"), None);
}

// ---------------------------------------------------------------------------
// Property: random events against a model of Ray
// ---------------------------------------------------------------------------

/// Mirrors what `store::apply` writes.
fn apply(f: &mut JobFacts, s: &Step) {
    f.status = s.to;
    if let Some(a) = s.changes.attempt {
        f.attempt = a;
    }
    if let Some(r) = s.changes.retiring_attempt {
        f.retiring_attempt = r;
    }
    if let Some(r) = &s.changes.stop_reason {
        f.stop_reason = r.clone();
    }
    match s.changes.preempted {
        Some(true) => f.preempting = true,
        Some(false) => f.preempting = false,
        None => {}
    }
    if f.stop_reason.as_deref() == Some(CANCELLED) || f.stop_reason.is_none() {
        f.preempting = false;
    }
    if let Some(n) = s.changes.preemptions {
        f.preemptions = n;
    }
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum RayState {
    Pending,
    Running,
    Ended(S),
}

#[derive(Clone, Debug)]
enum Action {
    Grant,
    Answer(u8),
    RayStep(u8),
    Observe,
    PendingTimeout,
    Runtime,
    Cancel,
    Withdraw,
    Preempt,
    GraceOver,
}

fn action() -> impl Strategy<Value = Action> {
    prop_oneof![
        Just(Action::Grant),
        (0u8..3).prop_map(Action::Answer),
        (0u8..4).prop_map(Action::RayStep),
        Just(Action::Observe),
        Just(Action::PendingTimeout),
        Just(Action::Runtime),
        Just(Action::Cancel),
        Just(Action::Withdraw),
        Just(Action::Preempt),
        Just(Action::GraceOver),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    /// No sequence of events submits an attempt while another attempt of the job is
    /// alive in Ray (the job never runs twice), a terminal status never changes, and
    /// once Ray reports the current attempt finished the job is terminal.
    #[test]
    fn never_twice_never_stuck(actions in proptest::collection::vec(action(), 1..60)) {
        let mut f = facts(S::Queued);
        let mut ray: BTreeMap<u32, RayState> = BTreeMap::new();
        let mut stops: Vec<u32> = Vec::new();
        for a in actions {
            let event = match a {
                Action::Grant => Event::Granted { cluster: "c".into() },
                Action::Answer(0) => Event::RayAccepted { already_existed: false, attempts: 1 },
                Action::Answer(1) => Event::RayRefused { message: "bad".into() },
                Action::Answer(_) => Event::RayNotReady { reason: "503".into() },
                Action::RayStep(k) => {
                    // Ray moves one of its attempts on; a stopped one ends STOPPED once it
                    // would run.
                    let Some((&n, &st)) = ray.iter().nth(usize::from(k) % ray.len().max(1)) else { continue };
                    let next = match st {
                        RayState::Pending if stops.contains(&n) => RayState::Ended(S::Stopped),
                        RayState::Pending => RayState::Running,
                        RayState::Running if stops.contains(&n) => RayState::Ended(S::Stopped),
                        RayState::Running => RayState::Ended(S::Succeeded),
                        e => e,
                    };
                    ray.insert(n, next);
                    continue;
                }
                Action::Observe => {
                    // What the monitor would see: the retiring attempt first, then the current.
                    if let (S::Queued, Some(old)) = (f.status, f.retiring_attempt) {
                        match ray.get(&old) {
                            None => Event::RetiredAttemptGone,
                            Some(RayState::Ended(s)) => Event::RetiredAttemptEnded { status: *s },
                            _ => continue,
                        }
                    } else {
                        match (f.status, ray.get(&f.attempt)) {
                            (S::Pending | S::Running | S::Dispatching, Some(RayState::Ended(s))) => {
                                Event::SeenFinished { status: *s, message: None, started_at: None, finished_at: None }
                            }
                            (S::Pending | S::Dispatching, Some(RayState::Running)) => Event::SeenRunning { started_at: None },
                            (S::Dispatching, Some(RayState::Pending)) => Event::SeenPending,
                            _ => continue,
                        }
                    }
                }
                Action::PendingTimeout => {
                    if ray.get(&f.attempt) != Some(&RayState::Pending) { continue }
                    Event::PendingTooLong {
            waited_s: 61,
            scale_up: false,
        }
                }
                Action::Runtime => Event::RuntimeExceeded { limit_s: 1 },
                Action::Cancel => Event::CancelRequested,
                Action::Withdraw => Event::WithdrawQueued,
                Action::Preempt => preempt(),
                Action::GraceOver => Event::PreemptionGraceOver { grace_s: 30 },
            };
            // RayAccepted only happens after a grant, to the dispatching attempt.
            if matches!(event, Event::RayAccepted { .. }) && f.status == S::Dispatching {
                ray.entry(f.attempt).or_insert(RayState::Pending);
            }
            let before = f.clone();
            let decision = decide(id(), &f, &event);
            if matches!(event, Event::WithdrawQueued) && before.status != S::Queued {
                prop_assert!(!matches!(decision, Decision::Step(_)), "withdraw moved a {} job", before.status);
            }
            if let Decision::Step(s) = &decision {
                prop_assert!(!before.status.is_terminal(), "terminal {} changed by {event:?}", before.status);
                if let Some(RayCall::Submit { submission_id }) = &s.ray {
                    let (_, attempt) = parse_submission_id(submission_id).unwrap();
                    for (n, st) in &ray {
                        prop_assert!(*n == attempt || matches!(st, RayState::Ended(_)),
                            "attempt {attempt} submitted while attempt {n} is {st:?} in Ray");
                    }
                }
                if let Some(RayCall::Stop { submission_id }) = &s.ray {
                    stops.push(parse_submission_id(submission_id).unwrap().1);
                }
                apply(&mut f, s);
                if let Event::SeenFinished { .. } = event {
                    // Terminal, or (a preemption's stop confirmed) queued again.
                    prop_assert!(f.status.is_terminal() || (before.preempting && f.status == S::Queued));
                }
            }
        }
    }
}

/// A RUNNING row whose preemption's stop was decided at `preempted_at`.
fn preempting_row(preempted_at: chrono::DateTime<chrono::Utc>) -> entity::job::Model {
    entity::job::Model {
        id: id(),
        user_id: "a".into(),
        external_id: None,
        status: S::Running,
        priority: 0,
        entrypoint: "sleep 60".into(),
        runtime_env: None,
        metadata: None,
        cpu: 1.0,
        gpu: 0.0,
        memory_bytes: 0,
        cluster: Some("c".into()),
        message: None,
        max_runtime_s: None,
        submitted_at: preempted_at,
        dispatched_at: Some(preempted_at),
        started_at: Some(preempted_at),
        finished_at: None,
        attempt: 1,
        retiring_attempt: None,
        stop_reason: Some(preempted_for(Uuid::nil(), "b")),
        runtime_env_digest: None,
        preemptible: true,
        preemptions: 0,
        preempted_at: Some(preempted_at),
        custom_resources: None,
        pool: None,
        lease_expires_at: None,
    }
}

#[test]
fn a_preemption_ray_still_runs_past_the_grace_is_observed_as_grace_over() {
    let t0 = chrono::Utc::now();
    let limits = Limits {
        pending_timeout_s: 60.0,
        scale_up: false,
        max_runtime_s: 86_400.0,
        lost_job_grace_s: 60.0,
        preemption_grace_s: 30.0,
    };
    let running = crate::ray::RayJob {
        submission_id: Some(id().to_string()),
        job_id: None,
        status: crate::ray::RayJobStatus::Running,
        message: None,
        error_type: None,
        start_time: None,
        end_time: None,
        driver_exit_code: None,
    };
    let row = preempting_row(t0);
    let at = |s: i64| t0 + chrono::Duration::seconds(s);
    assert_eq!(
        observe_current(&row, "c", Some(&running), 0.0, at(29), &limits),
        None
    );
    assert_eq!(
        observe_current(&row, "c", Some(&running), 0.0, at(31), &limits),
        Some(Event::PreemptionGraceOver { grace_s: 30 })
    );
    // Cancelled meanwhile: the cancel's stop is followed as any other.
    let mut cancelled = row.clone();
    cancelled.stop_reason = Some(CANCELLED.into());
    assert_eq!(
        observe_current(&cancelled, "c", Some(&running), 0.0, at(31), &limits),
        None
    );
}
