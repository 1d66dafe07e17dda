//! The guests of one QEMU line: one per configuration, booted together, each migrated
//! from QEMU to QEMU (the destination becomes the next source), replaced by a fresh boot
//! when a destination is unhealthy; and the in-process host controller for the
//! configurations that use it.

use super::model::{Config, Kernel, QemuLine};
use crate::guest::Health;
use crate::{step, wait_for, GuestImage, Qemu, TcgThread, VmSpec};
use autoballoon::config::{Config as CtlConfig, ControllerConfig, LogFormat, PolicyConfig, ShrinkSetting, VmConfig};
use autoballoon::controller::{Controller, VmCommand, VmHandle, VmState};
use autoballoon::log::{Level, Logger};
use autoballoon_core::Kib;
use autoballoon_qmp::Qmp;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// The guest images: the project's (stock kernel) and the patched kernel's.
pub struct Images {
    pub stock: GuestImage,
    pub patched: Option<GuestImage>,
}

impl Images {
    /// The stock image given on a command line (else `$AUTOBALLOON_IMAGE`'s) and the
    /// patched one if given, each checked for its files.
    pub fn load(stock: Option<&std::path::Path>, patched: Option<&std::path::Path>) -> Result<Images, String> {
        let stock = GuestImage::given_or_env(stock).map_err(|e| e.to_string())?;
        let patched = patched.map(GuestImage::at).transpose().map_err(|e| e.to_string())?;
        Ok(Images { stock, patched })
    }
    pub fn of(&self, k: Kernel) -> Result<&GuestImage, String> {
        match k {
            Kernel::Stock => Ok(&self.stock),
            Kernel::Patched => self.patched.as_ref().ok_or_else(|| "no patched image (--patched-image)".into()),
        }
    }
}

pub struct Guest {
    pub config: Config,
    pub q: Qemu,
    /// Migrations so far and boots so far (for the next QEMU's name).
    pub hops: u32,
    pub boots: u32,
    /// The last look at the guest's log.
    pub seen: Seen,
    /// Its last migration: (moment, run).
    pub last: Option<(super::model::Moment, u32)>,
    /// A spike ran in it since its boot (that travels with migrations).
    pub spiked: bool,
}

/// At the last look at a guest's log (it travels with migrations): OOM kills, kernel error
/// lines, taint flags; what a measurement adds is counted against it.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Seen {
    pub oom_kills: usize,
    pub errors: usize,
    pub taint: u64,
}

impl Seen {
    /// What `h` adds to the last look (errors as lines, taint as newly set flags, OOM
    /// kills), and takes `h` as the new last look. A guest whose shell did not answer is
    /// judged on what its console printed, all of it.
    pub fn news(&mut self, h: &Health) -> (Vec<String>, Option<u64>, usize) {
        let errors: Vec<String> = if h.shell { h.kernel_errors.iter().skip(self.errors).cloned().collect() } else { h.kernel_errors.clone() };
        let taint = h.tainted.map(|t| t & !self.taint);
        let kills = h.oom_kills.saturating_sub(self.oom_kills);
        if h.shell {
            self.errors = h.kernel_errors.len();
            self.oom_kills = h.oom_kills;
        }
        self.taint |= h.tainted.unwrap_or(0);
        (errors, taint, kills)
    }
}

pub struct Fleet {
    pub line: QemuLine,
    pub qemu: PathBuf,
    pub version: String,
    pub memory: Kib,
    pub out: PathBuf,
    pub guests: Vec<Guest>,
    ctl: Option<Controller>,
    /// The controller's `migration_shrink` (`autoballoon-bench --migration-shrink`).
    pub migration_shrink: ShrinkSetting,
    /// vCPUs of every guest (sources and destinations).
    pub cpus: u32,
    /// The controller's policy for every controlled guest (the defaults unless
    /// [`Fleet::restart_controller_with`] set others).
    policy: PolicyConfig,
}

const BOOT: Duration = Duration::from_secs(240);

/// The policy keys of a benchmark's `--policy` (TOML of the `[defaults]` table) over the
/// defaults.
pub fn policy_from_toml(text: &str) -> Result<PolicyConfig, String> {
    toml::from_str::<PolicyConfig>(text).map_err(|e| format!("--policy: {e}"))
}

/// How a configuration's guests are started (sources and destinations alike).
pub fn spec(config: Config, name: &str, memory: Kib, qemu: &Path) -> VmSpec {
    spec_cpus(config, name, memory, qemu, 1)
}

/// [`spec`] with `cpus` vCPUs.
pub fn spec_cpus(config: Config, name: &str, memory: Kib, qemu: &Path, cpus: u32) -> VmSpec {
    VmSpec {
        cpus,
        qemu: qemu.to_path_buf(),
        agent: config.agent(),
        free_page_reporting: config.fpr(),
        free_page_hint: config.hint(),
        append: config.append().into(),
        deflate_on_oom: true,
        // Under QEMU 7.2's multi-threaded TCG even guests without a balloon crashed after
        // migrations (SPEC part 5); the bench measures with one TCG thread.
        tcg_thread: Some(TcgThread::Single),
        ..VmSpec::new(name, memory)
    }
}

impl Fleet {
    /// Boots one guest per configuration (all at once, then waits for each) and starts the
    /// controller for those it runs.
    pub fn boot(line: QemuLine, qemu: &Path, configs: &[Config], images: &Images, memory: Kib, out: &Path, migration_shrink: ShrinkSetting) -> Result<Fleet, String> {
        Fleet::boot_with_disk(line, qemu, configs, images, memory, out, migration_shrink, None)
    }

    /// [`Fleet::boot`], each guest with its own copy of `disk` (`/dev/vda`), if given; such
    /// guests are not for migrating.
    #[allow(clippy::too_many_arguments)]
    pub fn boot_with_disk(line: QemuLine, qemu: &Path, configs: &[Config], images: &Images, memory: Kib, out: &Path, migration_shrink: ShrinkSetting, disk: Option<&Path>) -> Result<Fleet, String> {
        Fleet::boot_full(line, qemu, configs, images, memory, out, migration_shrink, disk, 1)
    }

    /// [`Fleet::boot`] with `cpus` vCPUs per guest.
    #[allow(clippy::too_many_arguments)]
    pub fn boot_cpus(line: QemuLine, qemu: &Path, configs: &[Config], images: &Images, memory: Kib, out: &Path, migration_shrink: ShrinkSetting, cpus: u32) -> Result<Fleet, String> {
        Fleet::boot_full(line, qemu, configs, images, memory, out, migration_shrink, None, cpus)
    }

    #[allow(clippy::too_many_arguments)]
    fn boot_full(line: QemuLine, qemu: &Path, configs: &[Config], images: &Images, memory: Kib, out: &Path, migration_shrink: ShrinkSetting, disk: Option<&Path>, cpus: u32) -> Result<Fleet, String> {
        std::fs::create_dir_all(out).map_err(|e| format!("{}: {e}", out.display()))?;
        let mut started = Vec::new();
        for &c in configs {
            let image = images.of(c.kernel())?;
            let mut vm = spec_cpus(c, &format!("{}-b1", c.key()), memory, qemu, cpus);
            if let Some(d) = disk {
                let copy = out.join(format!("{}.disk.raw", c.key()));
                std::fs::copy(d, &copy).map_err(|e| format!("copying {} to {}: {e}", d.display(), copy.display()))?;
                vm.disk = Some(copy);
            }
            let q = step(&format!("starting {}", c.key()), Qemu::start(image, vm, out))?;
            started.push((c, q));
        }
        let mut guests = Vec::new();
        for (c, q) in started {
            let t = step(&format!("booting {}", c.key()), q.wait_booted(BOOT))?;
            println!("[bench]   {} booted in {:.0} s", c.key(), t.as_secs_f64());
            guests.push(Guest { config: c, q, hops: 0, boots: 1, seen: Seen::default(), last: None, spiked: false });
        }
        let version = match guests.first() {
            Some(g) => step("QMP", Qmp::connect_with_retry(&g.q.qmp_ctl, Instant::now() + Duration::from_secs(10)))?.version().to_string(),
            None => String::new(),
        };
        let mut f = Fleet { line, qemu: qemu.to_path_buf(), version, memory, out: out.to_path_buf(), guests, ctl: None, migration_shrink, cpus, policy: PolicyConfig::default() };
        f.start_controller()?;
        Ok(f)
    }

    fn start_controller(&mut self) -> Result<(), String> {
        let vms: Vec<VmConfig> =
            self.guests.iter().filter(|g| g.config.controlled()).map(|g| VmConfig { agent: Some(g.q.agent.clone()), ..VmConfig::new(g.config.key(), g.q.qmp.clone()) }).collect();
        if vms.is_empty() {
            return Ok(());
        }
        let config = CtlConfig { controller: ControllerConfig { migration_shrink: self.migration_shrink, ..ControllerConfig::default() }, defaults: self.policy.clone(), vms, ..Default::default() };
        config.validate().map_err(|e| e.to_string())?;
        let log = self.out.join(format!("controller-{}.log", self.line_key()));
        // Every tick's decision, also the ones that change nothing: a point's log tells
        // what the controller saw between its actions.
        let logger = Logger::with_level(LogFormat::Text, Level::Debug).to_file(&log).map_err(|e| e.to_string())?;
        self.ctl = Some(Controller::start(&config, logger));
        Ok(())
    }

    fn line_key(&self) -> &'static str {
        match self.line {
            QemuLine::System => "system",
            QemuLine::Qemu10 => "qemu10",
        }
    }

    pub fn guest(&mut self, c: Config) -> &mut Guest {
        self.guests.iter_mut().find(|g| g.config == c).expect("a guest per configuration")
    }

    /// The controller's handle of a controlled configuration's VM.
    pub fn vm(&self, c: Config) -> Option<VmHandle> {
        self.ctl.as_ref().and_then(|ctl| ctl.vm(c.key()))
    }

    /// Pauses the controller for `c` (no-op for others) and waits until it took it.
    pub fn pause(&self, c: Config) -> Result<(), String> {
        if let Some(vm) = self.vm(c) {
            vm.command(VmCommand::Pause);
            wait_for(Duration::from_secs(10), Duration::from_millis(50), || vm.snapshot().state == VmState::Paused).ok_or("the controller did not pause")?;
        }
        Ok(())
    }

    pub fn resume(&self, c: Config) {
        if let Some(vm) = self.vm(c) {
            vm.command(VmCommand::Resume);
        }
    }

    /// The guest of `c` now runs in `dest` (after a migration): the controller follows.
    pub fn moved(&mut self, c: Config, dest: Qemu) {
        let g = self.guest(c);
        g.q = dest;
        g.hops += 1;
        let (qmp, agent) = (g.q.qmp.clone(), g.q.agent.clone());
        if let Some(vm) = self.vm(c) {
            vm.command(VmCommand::Retarget { qmp, agent: Some(agent) });
        }
    }

    /// A destination for `c`'s next migration: a QEMU waiting on a free port.
    pub fn destination(&mut self, c: Config, images: &Images) -> Result<(Qemu, u16), String> {
        let (memory, qemu, out, cpus) = (self.memory, self.qemu.clone(), self.out.clone(), self.cpus);
        let g = self.guest(c);
        let name = format!("{}-b{}m{}", c.key(), g.boots, g.hops + 1);
        step("starting the destination", Qemu::start_incoming(images.of(c.kernel())?, spec_cpus(c, &name, memory, &qemu, cpus), &out))
    }

    /// Replaces `c`'s guest by a fresh boot (after an unhealthy destination or a failed
    /// migration), so that one crash does not spoil the next measurements.
    pub fn reboot(&mut self, c: Config, images: &Images) -> Result<(), String> {
        let (memory, qemu, out, cpus) = (self.memory, self.qemu.clone(), self.out.clone(), self.cpus);
        let g = self.guest(c);
        g.q.kill();
        g.boots += 1;
        g.hops = 0;
        g.seen = Seen::default();
        g.spiked = false;
        let name = format!("{}-b{}", c.key(), g.boots);
        println!("[bench]   rebooting {} as {name}", c.key());
        let q = step("starting QEMU", Qemu::start(images.of(c.kernel())?, spec_cpus(c, &name, memory, &qemu, cpus), &out))?;
        step("booting", q.wait_booted(BOOT))?;
        let (qmp, agent) = (q.qmp.clone(), q.agent.clone());
        g.q = q;
        if let Some(vm) = self.vm(c) {
            vm.command(VmCommand::Retarget { qmp, agent: Some(agent) });
        }
        Ok(())
    }

    /// Stops the controller and starts it again with `policy` for every controlled guest
    /// (an experiment's keys instead of the defaults).
    pub fn restart_controller_with(&mut self, policy: PolicyConfig) -> Result<(), String> {
        if let Some(ctl) = self.ctl.take() {
            ctl.stop();
        }
        self.policy = policy;
        self.start_controller()
    }

    /// Stops the controller and every guest.
    pub fn shutdown(mut self) {
        if let Some(ctl) = self.ctl.take() {
            ctl.stop();
        }
        for g in &mut self.guests {
            g.q.kill();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn news_are_what_came_since_the_last_look() {
        let h = |shell, errors: &[&str], tainted, oom_kills| Health { shell, kernel_errors: errors.iter().map(|e| e.to_string()).collect(), tainted, oom_kills };
        let mut s = Seen::default();
        assert_eq!(s.news(&h(true, &["[1] WARNING: x"], Some(512), 1)), (vec!["[1] WARNING: x".to_string()], Some(512), 1));
        assert_eq!(s.news(&h(true, &["[1] WARNING: x"], Some(512), 1)), (vec![], Some(0), 0), "nothing new");
        assert_eq!(s.news(&h(true, &["[1] WARNING: x", "[9] BUG: y"], Some(512 | 4096), 3)), (vec!["[9] BUG: y".to_string()], Some(4096), 2));
        // A crashed destination: its console's lines, all of them.
        assert_eq!(s.news(&h(false, &["[1] Oops: z"], None, 0)).0, vec!["[1] Oops: z".to_string()]);
    }

    #[test]
    fn fpr_at_order_0_is_fpr_on_the_patched_kernel_booted_with_the_order() {
        let c = Config::FprOrder0Patched;
        assert_eq!((c.kernel(), c.fpr(), c.hint(), c.ballooning()), (Kernel::Patched, true, false, false));
        let v = spec(c, "o0", Kib::from_gib_saturating(2), Path::new("qemu-system-x86_64"));
        assert_eq!((v.append.as_str(), v.free_page_reporting, v.free_page_hint), ("page_reporting.page_reporting_order=0", true, false));
        assert_eq!(spec(Config::FprPatched, "o9", Kib::from_gib_saturating(2), Path::new("q")).append, "", "the others keep the image's command line");
        assert!(!Config::DEFAULT.contains(&c), "not in make bench's list");
    }

    #[test]
    fn the_hook_before_reclaim_is_the_patched_product_booted_with_cache_first_0() {
        let (c, d) = (Config::AbPatchedFprBeforeReclaim, Config::AbPatchedFpr);
        assert_eq!((c.kernel(), c.fpr(), c.hint(), c.agent()), (d.kernel(), d.fpr(), d.hint(), d.agent()));
        assert!(!c.qemu_own() && c.ballooning() && !c.controlled());
        let v = spec(c, "cf0", Kib::from_gib_saturating(2), Path::new("q"));
        assert_eq!(v.append, "virtio_balloon.cache_first=0");
        assert_eq!(spec(d, "cf1", Kib::from_gib_saturating(2), Path::new("q")).append, "", "the default placement keeps the image's command line");
        assert!(!Config::DEFAULT.contains(&c), "not in make bench's list");
    }
}
