//! Pieces first: a shrink on the patched kernel takes the guest's free pieces under 2 MiB
//! before whole units.
//!
//! Why: the patched driver inflates in 2 MiB units while a unit is wanted and one is free,
//! and in a guest with free page reporting the free 2 MiB blocks are the ones the host no
//! longer backs. A shrink then takes memory the host does not hold, and the pieces under
//! 2 MiB that the guest's jobs touched and freed stay free in the guest and resident in
//! the host: some 60 MiB a guest after a job sequence, its idle floor (docs/spikes.md,
//! *The idle floor*). Asked for less than a unit, the driver takes single 4 KiB pages,
//! which the page allocator hands out from the smallest free blocks. So a shrink goes at
//! once (in units) down to its goal plus the pieces (the free pages in blocks under 2 MiB,
//! /proc/buddyinfo), then in steps of [`STEP`] while the steps still take pieces (the count
//! falls by at least half a step each time), then the rest at once. The guest ends at the size the loop asked for either way; only which pages
//! the balloon holds differs. A growth, or a deflation by the allocator hook, gives units
//! back first (the driver deflates the largest blocks it holds).
//!
//! Never waits: each step is written once the balloon reached the last one, which
//! [`PiecesFirst::poll`] sees; the agent calls it between samples while a shrink is under
//! way. Meanwhile the loop sees the shrink's goal as the target in force. A target moved by
//! anyone else (the allocator hook raising it, the stop for a migration) ends the steps
//! where the balloon is.

use super::{Backend, FileError, WriteError};
use autoballoon_core::procfs::parse_buddyinfo;
use autoballoon_core::{Kib, Pages};
use std::cell::RefCell;
use std::path::PathBuf;
use std::rc::Rc;
use std::time::{Duration, Instant};

/// One step: under a unit (512 pages), so the driver takes single pages.
pub const STEP: Pages = Pages(480);
/// At most this many steps a shrink (120 MiB): the rest goes at once.
pub const MAX_STEPS: u32 = 64;
/// A step the balloon has not reached by then ends the steps.
pub const STEP_TIMEOUT: Duration = Duration::from_secs(2);
/// Blocks under this order are pieces: under 2 MiB.
const UNIT_ORDER: u32 = 9;

fn step_kib() -> Kib {
    STEP.to_kib_saturating()
}

/// What to write after the balloon reached the step it was given: the next step, or the
/// goal. Pure. `written`: the step reached; `taken`: how much fewer pieces the guest has
/// now than before that step; `left`: the pieces the guest has now.
pub fn next_after(goal: Kib, written: Kib, taken: Kib, left: Kib, steps: u32) -> Kib {
    let step = step_kib();
    // Less than two steps to go: the rest is under a unit and taken in single pages anyway.
    let room = written.saturating_sub(goal) >= step.saturating_add(step);
    let worth = taken.saturating_add(taken) >= step && left >= step;
    if room && worth && steps < MAX_STEPS {
        written.saturating_sub(step)
    } else {
        goal
    }
}

/// The first write of a shrink from `from` (the size the guest is at, or the target in
/// force if lower) to `goal`, with `pieces` free in blocks under 2 MiB, and whether it is a
/// step (judged by the pieces it takes) rather than the bulk: the goal at once (nothing to
/// take in steps); the bulk, down to the goal plus the pieces (in units, at once: the steps
/// then take only the last of the shrink, not delay it); or, when the shrink is no larger
/// than the pieces, a first step.
pub fn first(from: Kib, goal: Kib, pieces: Kib) -> (Kib, bool) {
    let step = step_kib();
    if from.saturating_sub(goal) < step.saturating_add(step) || pieces < step {
        return (goal, false);
    }
    let bulk = goal.saturating_add(pieces.min(Kib(step.0.saturating_mul(u64::from(MAX_STEPS)))));
    if bulk.saturating_add(step) < from {
        (bulk, false)
    } else {
        (from.saturating_sub(step), true)
    }
}

/// A shrink under way in steps.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Shrink {
    goal: Kib,
    /// The step written last, and when.
    written: Kib,
    at: Instant,
    /// Pieces when that step was written.
    pieces: Kib,
    /// Steps written so far (0: the bulk, which is not judged by the pieces it takes).
    steps: u32,
    /// What the steps took so far.
    taken: Kib,
}

/// How a shrink in steps ended, for the log.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ended {
    pub goal: Kib,
    pub steps: u32,
    /// Pieces under 2 MiB the steps took (the fall of /proc/buddyinfo's count).
    pub taken: Kib,
    /// Whether someone else moved the target (the steps stopped where the balloon was).
    pub moved: bool,
}

/// The patched kernel's balloon, shrinking pieces first ([`self`]).
pub struct PiecesFirst {
    inner: Rc<dyn Backend>,
    buddyinfo: PathBuf,
    shrink: RefCell<Option<Shrink>>,
}

impl PiecesFirst {
    /// `inner` with pieces first, the pieces read from `proc`/buddyinfo.
    pub fn new(inner: Rc<dyn Backend>, proc: &std::path::Path) -> PiecesFirst {
        PiecesFirst { inner, buddyinfo: proc.join("buddyinfo"), shrink: RefCell::new(None) }
    }

    /// Free memory in blocks under 2 MiB; `None` if the file cannot be read or parsed
    /// (then shrinks go at once, as without this).
    fn pieces(&self) -> Option<Kib> {
        let text = std::fs::read_to_string(&self.buddyinfo).ok()?;
        parse_buddyinfo(&text).ok().map(|b| b.free_below_order(UNIT_ORDER).to_kib_saturating())
    }

    /// Whether a shrink is under way in steps (the agent then polls between samples).
    pub fn under_way(&self) -> bool {
        self.shrink.borrow().is_some()
    }

    /// Writes the next step once the balloon reached the last; returns how the steps
    /// ended when they did.
    pub fn poll(&self, now: Instant) -> Result<Option<Ended>, WriteError> {
        let Some(mut s) = *self.shrink.borrow() else { return Ok(None) };
        let (Ok((size, _)), Ok(in_force)) = (self.inner.size(), self.inner.target_in_force()) else { return Ok(None) };
        if in_force != Some(s.written) {
            *self.shrink.borrow_mut() = None;
            return Ok(Some(Ended { goal: s.goal, steps: s.steps, taken: s.taken, moved: true }));
        }
        let reached = size <= s.written;
        if !reached && now.saturating_duration_since(s.at) < STEP_TIMEOUT {
            return Ok(None);
        }
        let left = self.pieces().unwrap_or(Kib::ZERO);
        let taken = s.pieces.saturating_sub(left);
        s.taken = s.taken.saturating_add(taken);
        let next = match (reached, s.steps) {
            (false, _) => s.goal,
            // The bulk reached: the first step, if two fit above the goal and the pieces
            // are still there (the bulk is not judged by what it took).
            (true, 0) => next_after(s.goal, s.written, step_kib(), left, 0),
            (true, n) => next_after(s.goal, s.written, taken, left, n),
        };
        self.inner.set_guest_size(next)?;
        if next == s.goal {
            *self.shrink.borrow_mut() = None;
            return Ok(Some(Ended { goal: s.goal, steps: s.steps, taken: s.taken, moved: false }));
        }
        *self.shrink.borrow_mut() = Some(Shrink { written: next, at: now, pieces: left, steps: s.steps + 1, ..s });
        Ok(None)
    }
}

impl Backend for PiecesFirst {
    fn name(&self) -> &'static str {
        self.inner.name()
    }
    fn size(&self) -> Result<(Kib, Kib), FileError> {
        self.inner.size()
    }
    /// The shrink's goal while its steps are under way (the loop's own command), else the
    /// balloon's.
    fn target_in_force(&self) -> Result<Option<Kib>, FileError> {
        let in_force = self.inner.target_in_force()?;
        Ok(match *self.shrink.borrow() {
            Some(s) if in_force == Some(s.written) => Some(s.goal),
            _ => in_force,
        })
    }
    fn set_guest_size(&self, goal: Kib) -> Result<(), WriteError> {
        let under_way = *self.shrink.borrow();
        if let Some(s) = under_way.filter(|s| goal < s.written) {
            // A lower goal while the steps go on: they go on towards it.
            *self.shrink.borrow_mut() = Some(Shrink { goal, ..s });
            return Ok(());
        }
        *self.shrink.borrow_mut() = None;
        let Ok((size, _)) = self.inner.size() else { return self.inner.set_guest_size(goal) };
        let from = self.inner.target_in_force().ok().flatten().map_or(size, |t| t.min(size));
        let pieces = if from > goal { self.pieces().unwrap_or(Kib::ZERO) } else { Kib::ZERO };
        let (write, step) = first(from, goal, pieces);
        self.inner.set_guest_size(write)?;
        if write != goal {
            *self.shrink.borrow_mut() = Some(Shrink { goal, written: write, at: Instant::now(), pieces, steps: u32::from(step), taken: Kib::ZERO });
        }
        Ok(())
    }
    fn held_for_hinting(&self) -> Result<Option<Kib>, FileError> {
        self.inner.held_for_hinting()
    }
    fn agent_decides(&self) -> bool {
        self.inner.agent_decides()
    }
    fn stepping(&self) -> bool {
        self.under_way()
    }
    fn step(&self, now: Instant) -> Result<Option<Ended>, WriteError> {
        self.poll(now)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::kernel::KernelBalloon;
    use crate::testutil::ProcTree;

    fn mib(m: u64) -> Kib {
        Kib::from_mib_saturating(m)
    }

    #[test]
    fn steps_go_on_while_they_take_pieces() {
        let step = step_kib();
        assert_eq!(step, Kib(1920));
        assert_eq!(first(mib(300), mib(200), mib(60)), (mib(260), false), "the bulk in units at once, the pieces' worth left for the steps");
        assert_eq!(first(mib(300), mib(200), mib(99)), (mib(300).saturating_sub(step), true), "no room for a bulk: a step first");
        assert_eq!(first(mib(1500), mib(200), mib(500)), (mib(320), false), "at most MAX_STEPS steps' worth left");
        assert_eq!(first(mib(300), mib(200), Kib(1000)), (mib(200), false), "fewer pieces than a step: at once");
        assert_eq!(first(mib(203), mib(200), mib(60)), (mib(200), false), "under two steps: single pages anyway");
        assert_eq!(first(mib(200), mib(300), mib(60)), (mib(300), false), "a growth: at once");
        let w = mib(290);
        assert_eq!(next_after(mib(200), w, step, mib(40), 3), w.saturating_sub(step), "a whole step taken from the pieces");
        assert_eq!(next_after(mib(200), w, Kib(960), mib(40), 3), w.saturating_sub(step), "half a step is still worth it");
        assert_eq!(next_after(mib(200), w, Kib(900), mib(40), 3), mib(200), "less: the step split a large block, the rest at once");
        assert_eq!(next_after(mib(200), w, step, Kib(1000), 3), mib(200), "no pieces left");
        assert_eq!(next_after(mib(200), w, step, mib(40), MAX_STEPS), mib(200), "enough steps");
        assert_eq!(next_after(mib(200), mib(203), step, mib(40), 3), mib(200), "the rest is under two steps");
    }

    /// A fake driver: the balloon reaches whatever target is written at once, in units
    /// while a unit is wanted, else in single pages, which it takes from /proc/buddyinfo's
    /// order-0 count while there are some.
    fn driver(t: &ProcTree, buddy: &std::path::Path, pieces_pages: &mut u64) {
        let current = t.read(&t.kernel.join("current_pages"));
        let target = std::fs::read_to_string(t.kernel.join("target_pages")).map_or(current, |s| s.trim().parse().unwrap());
        if target < current && current - target < 512 {
            *pieces_pages = pieces_pages.saturating_sub(current - target);
        }
        std::fs::write(t.kernel.join("current_pages"), format!("{target}\n")).unwrap();
        std::fs::write(buddy, format!("Node 0, zone Normal {pieces_pages} 0 0 0 0 0 0 0 0 0 100\n")).unwrap();
    }

    #[test]
    fn a_shrink_takes_the_pieces_in_steps_then_the_rest_at_once() {
        let t = ProcTree::new("pieces-first", "linux-6.1-guest-idle");
        let buddy = t.proc.join("buddyinfo");
        let pages = |m: u64| mib(m).to_pages_floor().0;
        t.set_kernel(pages(300), pages(2048));
        let mut pieces = pages(10);
        driver(&t, &buddy, &mut pieces);
        let p = PiecesFirst::new(Rc::new(KernelBalloon::new(&t.kernel)), &t.proc);
        p.set_guest_size(mib(200)).unwrap();
        assert!(p.under_way());
        assert_eq!(p.target_in_force().unwrap(), Some(mib(200)), "the loop sees its own goal");
        assert_eq!(t.read(&t.kernel.join("target_pages")), pages(210), "the bulk first, the pieces' worth left");
        let now = Instant::now();
        let mut ended = None;
        for _ in 0..20 {
            driver(&t, &buddy, &mut pieces);
            if let Some(e) = p.poll(now).unwrap() {
                ended = Some(e);
                break;
            }
        }
        let e = ended.expect("the steps end");
        assert!(!e.moved && e.steps == 4, "{e:?}: 10 MiB of pieces, 1.9 MiB a step, the last 2.5 MiB under two steps");
        assert_eq!(e.taken, Kib(4 * 1920), "{e:?}");
        assert_eq!(t.read(&t.kernel.join("target_pages")), pages(200), "then the goal at once");
        assert!(!p.under_way());
        assert_eq!(p.target_in_force().unwrap(), Some(mib(200)));
    }

    #[test]
    fn a_target_moved_by_the_hook_or_a_growth_ends_the_steps() {
        let t = ProcTree::new("pieces-moved", "linux-6.1-guest-idle");
        let buddy = t.proc.join("buddyinfo");
        let pages = |m: u64| mib(m).to_pages_floor().0;
        t.set_kernel(pages(300), pages(2048));
        let mut pieces = pages(50);
        driver(&t, &buddy, &mut pieces);
        let p = PiecesFirst::new(Rc::new(KernelBalloon::new(&t.kernel)), &t.proc);
        p.set_guest_size(mib(100)).unwrap();
        driver(&t, &buddy, &mut pieces);
        // The hook served an allocation and raised the target by 32 MiB.
        let raised = t.read(&t.kernel.join("target_pages")) + pages(32);
        std::fs::write(t.kernel.join("target_pages"), format!("{raised}\n")).unwrap();
        let e = p.poll(Instant::now()).unwrap().expect("ended");
        assert!(e.moved, "{e:?}");
        assert_eq!(t.read(&t.kernel.join("target_pages")), raised, "left where the hook put it");
        assert_eq!(p.target_in_force().unwrap(), Some(Pages(raised).to_kib_saturating()), "and the loop sees it");
        // A growth while steps go on is written at once.
        t.set_kernel(pages(300), pages(2048));
        std::fs::write(t.kernel.join("target_pages"), format!("{}\n", pages(300))).unwrap();
        p.set_guest_size(mib(150)).unwrap();
        assert!(p.under_way());
        p.set_guest_size(mib(400)).unwrap();
        assert!(!p.under_way());
        assert_eq!(t.read(&t.kernel.join("target_pages")), pages(400));
    }

    #[test]
    fn a_step_never_reached_ends_in_the_goal() {
        let t = ProcTree::new("pieces-stuck", "linux-6.1-guest-idle");
        let buddy = t.proc.join("buddyinfo");
        let pages = |m: u64| mib(m).to_pages_floor().0;
        t.set_kernel(pages(300), pages(2048));
        std::fs::write(&buddy, "Node 0, zone Normal 20000 0 0 0 0 0 0 0 0 0 100\n").unwrap();
        let p = PiecesFirst::new(Rc::new(KernelBalloon::new(&t.kernel)), &t.proc);
        p.set_guest_size(mib(100)).unwrap();
        let now = Instant::now();
        assert_eq!(p.poll(now).unwrap(), None, "not reached yet");
        let e = p.poll(now + STEP_TIMEOUT).unwrap().expect("timed out");
        assert_eq!((e.moved, e.steps), (false, 0), "the bulk was not reached");
        assert_eq!(t.read(&t.kernel.join("target_pages")), pages(100));
        std::fs::remove_file(&buddy).unwrap();
        t.set_kernel(pages(300), pages(2048));
        p.set_guest_size(mib(100)).unwrap();
        assert!(!p.under_way(), "no buddyinfo: at once");
    }
}
