use super::*;
use proptest::prelude::*;

fn mib(n: u64) -> Kib {
    Kib::from_mib_saturating(n)
}
fn sample(at: u64, migrating: bool) -> Sample {
    Sample { at: Duration::from_secs(at), guest_size: mib(1000), max: mib(2048), migrating, ..Sample::default() }
}
/// The single-VM path: room, the policy's wish clamped into it, the final check.
fn apply(r: &GuardRails, st: &mut RailState, s: &Sample, want: u64, commanded: Kib) -> Verdict {
    let room = r.room(st, s, commanded);
    r.check(st, s, &room, mib(want), room.clamp(mib(want)))
}
fn set(v: Verdict) -> Kib {
    match v {
        Verdict::Set { target, .. } => target,
        other => panic!("expected a target, got {other:?}"),
    }
}

#[test]
fn clamps_and_aligns() {
    let r = GuardRails { min: mib(128), align: mib(2), ..Default::default() };
    let mut st = RailState::default();
    assert_eq!(apply(&r, &mut st, &sample(0, false), 10, mib(1000)), Verdict::Set { target: mib(128), limits: vec![Limit::RaisedToMin] });
    assert_eq!(apply(&r, &mut st, &sample(0, false), 5000, mib(1000)), Verdict::Set { target: mib(2048), limits: vec![Limit::LoweredToMax] });
    let room = r.room(&st, &sample(0, false), mib(1000));
    let odd = Kib(300 * 1024 + 1);
    assert_eq!(set(r.check(&mut st, &sample(0, false), &room, odd, odd)), mib(302));
}

#[test]
fn no_shrink_during_migration_but_growth_is_allowed() {
    let r = GuardRails::default();
    let mut st = RailState::default();
    let room = r.room(&st, &sample(0, true), mib(1000));
    assert_eq!((room.floor, room.floor_by), (mib(1000), Bound::Migration));
    assert_eq!(apply(&r, &mut st, &sample(0, true), 500, mib(1000)), Verdict::Hold(Hold::Migration));
    assert_eq!(set(apply(&r, &mut st, &sample(0, true), 1500, mib(1000))), mib(1500));
}

#[test]
fn step_limits_dead_band_and_hold_off() {
    let r = GuardRails { max_shrink_per_tick: mib(100), max_grow_per_tick: mib(300), dead_band: mib(8), hold_off: Duration::from_secs(5), ..Default::default() };
    let mut st = RailState::default();
    assert_eq!(apply(&r, &mut st, &sample(0, false), 500, mib(1000)), Verdict::Set { target: mib(900), limits: vec![Limit::ShrinkStepLimited] });
    assert_eq!(apply(&r, &mut st, &sample(1, false), 995, mib(1000)), Verdict::Hold(Hold::DeadBand));
    assert_eq!(apply(&r, &mut st, &sample(1, false), 1000, mib(1000)), Verdict::Hold(Hold::Unchanged));
    assert_eq!(apply(&r, &mut st, &sample(2, false), 1900, mib(1000)), Verdict::Set { target: mib(1300), limits: vec![Limit::GrowStepLimited] });
    assert_eq!(apply(&r, &mut st, &sample(6, false), 800, mib(1300)), Verdict::Hold(Hold::HoldOff));
    assert_eq!(set(apply(&r, &mut st, &sample(7, false), 800, mib(1300))), mib(1200));
}

#[test]
fn the_final_check_puts_a_balancer_answer_back_in_the_room() {
    let r = GuardRails { min: mib(128), max_shrink_per_tick: mib(100), ..Default::default() };
    let mut st = RailState::default();
    let s = sample(0, false);
    let room = r.room(&st, &s, mib(1000));
    assert_eq!((room.floor, room.ceiling), (mib(900), mib(2048)));
    // A balancer that asks for 0 or for u64::MAX gets the room's ends.
    assert_eq!(set(r.check(&mut st, &s, &room, mib(1000), Kib::ZERO)), mib(900));
    assert_eq!(set(r.check(&mut st, &s, &room, mib(1000), Kib::MAX)), mib(2048));
    // Less than the policy wanted, below the present size: reclaimed for another VM.
    assert_eq!(r.check(&mut st, &s, &room, mib(1200), mib(950)), Verdict::Set { target: mib(950), limits: vec![Limit::Reclaimed] });
    assert_eq!(r.check(&mut st, &s, &room, mib(1200), mib(1100)), Verdict::Set { target: mib(1100), limits: vec![Limit::HostShort] });
}

#[test]
fn a_sample_above_the_rails_max_is_brought_down_even_during_a_migration() {
    let r = GuardRails { max: mib(1500), ..Default::default() };
    let st = RailState::default();
    let room = r.room(&st, &sample(0, true), mib(2000));
    assert_eq!((room.floor, room.ceiling), (mib(1500), mib(1500)), "the ceiling wins over the migration hold");
}

proptest! {
    #[test]
    fn output_respects_every_rail(want_mib in 0u64..4096, cur_mib in 1u64..2048, min_mib in 0u64..512,
                                  step in 0u64..512, migrating: bool, at in 0u64..100, granted in any::<u64>()) {
        let r = GuardRails { min: mib(min_mib), max_shrink_per_tick: mib(step), ..Default::default() };
        let mut st = RailState::default();
        let cur = mib(cur_mib);
        let s = sample(at, migrating);
        let room = r.room(&st, &s, cur);
        // Whatever a balancer grants, the final check keeps every rail.
        for g in [room.clamp(mib(want_mib)), Kib(granted)] {
            if let Verdict::Set { target, .. } = r.check(&mut st, &s, &room, mib(want_mib), g) {
                prop_assert!(target <= mib(2048));
                prop_assert!(target >= mib(min_mib).min(mib(2048)));
                if migrating { prop_assert!(target > cur); }
                if step > 0 && target < cur { prop_assert!(cur.0 - target.0 <= step * 1024); }
            }
        }
    }
}

#[test]
fn preparing_a_migration_skips_the_step_and_the_hold_off_but_not_a_running_migration() {
    let r = GuardRails { min: mib(128), max_shrink_per_tick: mib(100), hold_off: Duration::from_secs(5), ..Default::default() };
    let mut st = RailState::default();
    // The guest grew at 0 s: the hold-off runs until 5 s.
    assert_eq!(set(apply(&r, &mut st, &sample(0, false), 1500, mib(1000))), mib(1500));
    assert_eq!(apply(&r, &mut st, &sample(1, false), 300, mib(1500)), Verdict::Hold(Hold::HoldOff));
    let mut prep = sample(1, false);
    prep.preparing_migration = true;
    let room = r.room(&st, &prep, mib(1500));
    assert_eq!((room.floor, room.floor_by), (mib(128), Bound::Limit), "neither the step nor the hold-off");
    assert_eq!(apply(&r, &mut st, &prep, 300, mib(1500)), Verdict::Set { target: mib(300), limits: vec![] });
    assert_eq!(apply(&r, &mut st, &prep, 10, mib(300)), Verdict::Set { target: mib(128), limits: vec![Limit::RaisedToMin] }, "the floor holds");
    prep.migrating = true;
    assert_eq!(apply(&r, &mut st, &prep, 200, mib(300)), Verdict::Hold(Hold::Migration), "no shrinking while the migration runs");
}

#[test]
fn a_migration_that_allows_shrinking_skips_the_step_and_the_hold_off() {
    let r = GuardRails { min: mib(128), max_shrink_per_tick: mib(100), hold_off: Duration::from_secs(5), ..Default::default() };
    let mut st = RailState::default();
    // The guest grew at 0 s (a spike during the migration): the hold-off runs until 5 s.
    let mut s = sample(0, true);
    s.shrink_while_migrating = true;
    assert_eq!(set(apply(&r, &mut st, &s, 1500, mib(1000))), mib(1500), "growth during a migration");
    s.at = Duration::from_secs(1);
    let room = r.room(&st, &s, mib(1500));
    assert_eq!((room.floor, room.floor_by), (mib(128), Bound::Limit), "no migration floor, no step, no hold-off");
    assert_eq!(apply(&r, &mut st, &s, 300, mib(1500)), Verdict::Set { target: mib(300), limits: vec![] });
    assert_eq!(apply(&r, &mut st, &s, 10, mib(300)), Verdict::Set { target: mib(128), limits: vec![Limit::RaisedToMin] }, "the floor holds");
    // The same facts without a migration running: the usual step and hold-off.
    let mut idle = sample(1, false);
    idle.shrink_while_migrating = true;
    assert!(!idle.migration_urgent());
    let room = r.room(&st, &idle, mib(1500));
    assert_eq!((room.floor, room.floor_by), (mib(1500), Bound::HoldOff));
    // Not allowed (QEMU < 9.0 under TCG, or unknown): the migration holds, as before.
    let mut held = sample(1, true);
    held.preparing_migration = true;
    assert_eq!(apply(&r, &mut st, &held, 300, mib(1500)), Verdict::Hold(Hold::Migration));
}

proptest! {
    /// While a migration runs, the floor is the present size exactly when shrinking is not
    /// allowed; growth is never held.
    #[test]
    fn migration_floor_iff_not_allowed(commanded in 128u64..=2048, want in 0u64..4096, allowed: bool, prep: bool, at in 0u64..20) {
        let r = GuardRails { min: mib(128), max_shrink_per_tick: mib(256), hold_off: Duration::from_secs(5), ..Default::default() };
        let mut st = RailState { last_grow_at: Some(Duration::from_secs(0)), ..Default::default() };
        let mut s = sample(at, true);
        s.shrink_while_migrating = allowed;
        s.preparing_migration = prep;
        let room = r.room(&st, &s, mib(commanded));
        if allowed {
            prop_assert_eq!(room.floor, mib(128));
        } else {
            prop_assert_eq!(room.floor, mib(commanded));
        }
        let v = apply(&r, &mut st, &s, want, mib(commanded));
        if want > commanded && want <= 2048 {
            prop_assert_eq!(set(v), mib(want));
        }
    }
}

/// A guest of 1000 MiB that uses `used` MiB of it (nothing in swap) and whose programs
/// committed `committed` MiB.
fn using(used: u64, committed: u64) -> Sample {
    let mem = crate::policy::MemView { total: mib(1000), available: mib(1000 - used), committed_as: mib(committed), anon_and_shmem: Some(mib(used)), ..Default::default() };
    Sample { mem: Some(mem), ..sample(0, false) }
}

#[test]
fn no_balancer_takes_a_guest_below_the_memory_it_uses() {
    let r = GuardRails { min: mib(64), ..Default::default() };
    let mut st = RailState::default();
    // 600 MiB used: a balancer that grants 300 of the 664 wanted is put back at 600; a
    // fixed request for 300 too, and says why.
    let room = r.room(&st, &using(600, 0), mib(1000));
    assert_eq!((room.floor, room.floor_by), (mib(600), Bound::InUse));
    assert_eq!(r.check(&mut st, &using(600, 0), &room, mib(664), mib(300)), Verdict::Set { target: mib(600), limits: vec![Limit::Reclaimed] });
    assert_eq!(r.check(&mut st, &using(600, 0), &room, mib(300), mib(300)), Verdict::Set { target: mib(600), limits: vec![Limit::RaisedToInUse] });
    // Memory its programs committed and do not have yet counts as used.
    assert_eq!(r.room(&st, &using(600, 750), mib(1000)).floor, mib(750));
    // It only stops a shrink: a guest using more than it was last given is not grown by it.
    let room = r.room(&st, &using(600, 1500), mib(800));
    assert_eq!((room.floor, room.floor_by), (mib(800), Bound::InUse));
    // Without the guest's view there is no such floor, only the minimum.
    assert_eq!(r.room(&st, &sample(0, false), mib(1000)).floor, mib(64));
}

#[test]
fn hinting_during_a_migration_holds_growth_unless_the_guest_runs_short() {
    let r = GuardRails::default();
    let mut st = RailState::default();
    let hinted = |running_short: bool| Sample { hints_free_pages: true, shrink_while_migrating: true, running_short, ..sample(0, true) };
    // The hinted pages look used: the policy asks for more than the guest has.
    let room = r.room(&st, &hinted(false), mib(1000));
    assert_eq!((room.ceiling, room.ceiling_by), (mib(1000), Bound::Hinting));
    assert_eq!(apply(&r, &mut st, &hinted(false), 1064, mib(1000)), Verdict::Hold(Hold::Hinting));
    // A guest that stalls grows: hinting hands its pages back under pressure.
    assert_eq!(set(apply(&r, &mut st, &hinted(true), 1064, mib(1000))), mib(1064));
    // Running short while its programs hold less than it has: the shed met hinting's
    // held pages; held. Programs that mapped more than it has: grown.
    let programs = |demand: u64| Sample { mem: Some(crate::policy::MemView { committed_as: mib(demand), anon_and_shmem: Some(mib(demand / 2)), ..Default::default() }), ..hinted(true) };
    assert_eq!(apply(&r, &mut st, &programs(150), 1064, mib(263)), Verdict::Hold(Hold::Hinting));
    assert_eq!(set(apply(&r, &mut st, &programs(1300), 1364, mib(263))), mib(1364));
    // A spike whose programs are under the size but whose page cache makes up the rest
    // runs short: grown, as far as it claims with the kernel's memory and the room, not to
    // the policy's target (hinting's held pages look used to it).
    let spike = Sample {
        mem: Some(crate::policy::MemView { committed_as: mib(1220), anon_and_shmem: Some(mib(1220)), file_cache: Some(mib(100)), ..Default::default() }),
        ..hinted(true)
    };
    assert_eq!(apply(&r, &mut st, &spike, 2048, mib(1343)), Verdict::Set { target: mib(1220 + 100 + 64 + 64), limits: vec![Limit::GrowHintedLimited] });
    assert_eq!(r.room(&st, &spike, mib(1343)).ceiling_by, Bound::Hinting);
    // A guest whose own memory took 180 MiB before the migration (its size less what was
    // available and what it claimed) is allowed that, not 64 MiB: a claim of 1215 MiB in
    // a 1390 MiB guest is short.
    let before = Sample { mem: Some(crate::policy::MemView { available: mib(1200), anon_and_shmem: Some(mib(20)), ..Default::default() }), guest_size: mib(1400), ..sample(0, false) };
    let room = r.room(&st, &before, mib(1400));
    let _ = r.check(&mut st, &before, &room, mib(1400), mib(1400));
    assert_eq!(st.uncounted, Some(mib(180)));
    let claim = |c: u64| Sample { mem: Some(crate::policy::MemView { committed_as: mib(c), anon_and_shmem: Some(mib(c)), ..Default::default() }), ..hinted(true) };
    assert_eq!(apply(&r, &mut st, &claim(1215), 2048, mib(1390)), Verdict::Set { target: mib(1215 + 180 + 64), limits: vec![Limit::GrowHintedLimited] });
    assert_eq!(apply(&r, &mut st, &claim(1100), 2048, mib(1390)), Verdict::Hold(Hold::Hinting), "1100 + 180 < 1390");
    // Not running short: held, whatever it claims.
    assert_eq!(apply(&r, &mut st, &Sample { running_short: false, ..spike.clone() }, 2048, mib(1343)), Verdict::Hold(Hold::Hinting));
    // Shrinking is the migration's rule, as without hinting.
    assert_eq!(set(apply(&r, &mut st, &hinted(false), 600, mib(1000))), mib(600));
    // Without a migration, or on a device that does not hint, nothing changes.
    assert_eq!(set(apply(&r, &mut st, &Sample { hints_free_pages: true, ..sample(0, false) }, 1064, mib(1000))), mib(1064));
    assert_eq!(set(apply(&r, &mut st, &sample(0, true), 1064, mib(1000))), mib(1064));
}
