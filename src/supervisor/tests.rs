//! The supervisor's state, unit-tested.

use super::*;

#[test]
fn sigkill_comes_at_the_earliest_reason_and_names_a_stop_signal() {
    let now = Instant::now();
    let s = |secs| now + Duration::from_secs(secs);
    let mut state = JobState::default();
    assert!(state.kill_by(None).is_none(), "running: nothing due");
    assert_eq!(state.stopped(), Stopped::No);
    state.stop(Why::Leftovers, KillAt::At(s(10)));
    assert_eq!(state.stopped(), Stopped::Leftovers);
    state.stop(Why::Signal(libc::SIGTERM), KillAt::At(s(5)));
    // A second stop signal does not move the first one's moment.
    state.stop(Why::Signal(libc::SIGINT), KillAt::At(s(1)));
    assert_eq!(state.kill_by(None), Some((s(5), Some(libc::SIGTERM))));
    assert!(!state.losing());
    assert_eq!(state.stopped(), Stopped::Signal);
    state.stop(Why::Lock, KillAt::At(s(2)));
    assert!(state.losing());
    assert_eq!(state.stopped(), Stopped::Lock);
    assert_eq!(state.kill_by(None), Some((s(2), None)));
}
