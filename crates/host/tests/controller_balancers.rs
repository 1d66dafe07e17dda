//! The host-wide balancer chosen in `[controller]` decides over every VM at once: growth
//! cut to a fixed capacity, iBalloon's classes in the status, one warning per episode of
//! a host short of memory.
mod common;

use autoballoon::config::{BalancerKind, ControllerConfig, PolicyConfig, SharesKeys};
use common::*;
use std::time::Duration;

const T: Duration = Duration::from_secs(15);

#[test]
fn cap_growth_keeps_two_growing_guests_within_the_capacity() {
    // Two 4 GiB guests that each want 3000 MiB + 64 MiB buffer, on a host that can give
    // 4096 MiB to both together.
    let (a, b) = (Guest::start(Fakes::start(), 3000), Guest::start(Fakes::start(), 3000));
    let controller = ControllerConfig { interval_ms: 200, balancer: BalancerKind::CapGrowth, capacity_mib: 4096, ..Default::default() };
    // Both start shrunk to 1 GiB, so growth is what the balancer has to share out.
    a.q().set_actual(mib(1024));
    b.q().set_actual(mib(1024));
    let d = Daemon::start_with(controller, vec![a.fakes.vm("a", None), b.fakes.vm("b", None)]);
    wait_for(T, "both guests grew", || a.fakes.last_request().is_some_and(|k| k > mib(1024)) && b.fakes.last_request().is_some_and(|k| k > mib(1024)));
    d.wait_samples("a", 10, T);
    let sum = a.q().actual().saturating_add(b.q().actual());
    assert!(sum <= mib(4096), "{} + {} > 4096 MiB", a.q().actual(), b.q().actual());
    assert!(sum >= mib(4096 - 64), "the capacity is used: {sum}");
    let s = d.status("a");
    assert!(s.metrics.grows >= 1, "{s:?}");
    // The host's figures: the guests want about 2 x 3064 MiB of a 4096 MiB capacity.
    let h = d.ctl().host_status();
    assert_eq!(h.capacity, Some(mib(4096)), "{h:?}");
    assert!(h.wanted.is_some_and(|w| w > mib(4096)), "{h:?}");
    assert_eq!(h.shortfall, h.wanted.map(|w| w.saturating_sub(mib(4096))), "{h:?}");
    assert!(h.steps > 0 && h.mem_total.is_some(), "{h:?}");
}

#[test]
fn iballoon_puts_each_vm_in_a_class() {
    let g = Guest::start(Fakes::start(), 1000);
    let controller = ControllerConfig { interval_ms: 200, balancer: BalancerKind::Iballoon, ..Default::default() };
    let d = Daemon::start_with(controller, vec![g.fakes.vm("a", None)]);
    wait_for(T, "a class in the status", || d.status("a").class.is_some());
    assert!(["critical", "warn", "normal"].contains(&d.status("a").class.unwrap()));
}

#[test]
fn a_host_short_of_memory_is_warned_about_once_per_episode() {
    // Shares reserves each VM's floor, 3000 MiB for each of two VMs, on a host that can give 4096 MiB.
    let (a, b) = (Guest::start(Fakes::start(), 3000), Guest::start(Fakes::start(), 3000));
    let controller = ControllerConfig { interval_ms: 200, balancer: BalancerKind::Shares, capacity_mib: 4096, ..Default::default() };
    let reserve = Some(SharesKeys { shares: 1000, max_mib: 0 });
    let floor = || Some(PolicyConfig { min_mib: 3000, ..Default::default() });
    let (mut va, mut vb) = (a.fakes.vm("a", floor()), b.fakes.vm("b", floor()));
    (va.shares, vb.shares) = (reserve, reserve);
    let d = Daemon::start_with(controller, vec![va, vb]);
    wait_for(T, "the host_short warning", || d.log.count("host_short") >= 1);
    d.wait_samples("a", 15, T);
    assert_eq!(d.log.count("host_short"), 1, "{}", d.log.text());
    let line = d.log.lines().into_iter().find(|l| l["event"] == "host_short").unwrap();
    assert!(line["msg"].as_str().unwrap().contains("host short of memory"), "{line}");
}
