//! Several real guests under one host memory limit, managed by the daemon as shipped: the
//! set-up the host-wide balancer tests (tests/host_*.rs) and the host benchmark
//! (`hostbench`) share, and a recorder of what the daemon's status shows.

use crate::daemon::Daemon;
use crate::hostlimit::HostLimit;
use crate::{GuestImage, Qemu, VmSpec};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

pub struct Fleet {
    pub guests: Vec<(String, Qemu)>,
    pub limit: HostLimit,
    pub dir: PathBuf,
}

impl Fleet {
    /// Boots every spec at once (each VM's folder `dir/NAME`), every QEMU born inside
    /// `limit`, and waits (at most 240 s) for their shells.
    pub fn start(image: &GuestImage, dir: &Path, specs: Vec<VmSpec>, limit: HostLimit) -> Result<Fleet, String> {
        // The QEMUs are children of this process: in the group from their first page.
        let me = std::process::id();
        limit.add(me).map_err(|e| e.to_string())?;
        let started: Vec<(String, Result<Qemu, String>)> = specs
            .into_iter()
            .map(|s| {
                let (name, vm_dir) = (s.name.clone(), dir.join(&s.name));
                let _ = std::fs::remove_dir_all(&vm_dir);
                let q = std::fs::create_dir_all(&vm_dir).map_err(|e| format!("{}: {e}", vm_dir.display())).and_then(|()| Qemu::start(image, s, &vm_dir).map_err(|e| e.to_string()));
                (name, q)
            })
            .collect();
        limit.leave(me).map_err(|e| e.to_string())?;
        let mut guests = Vec::new();
        for (n, q) in started {
            guests.push((n, q?));
        }
        for (_, q) in &guests {
            q.wait_booted(Duration::from_secs(240)).map_err(|e| e.to_string())?;
        }
        Ok(Fleet { guests, limit, dir: dir.to_path_buf() })
    }

    pub fn guest(&self, name: &str) -> &Qemu {
        &self.guests.iter().find(|(n, _)| n == name).expect("a guest of the fleet").1
    }

    /// `[[vm]]` tables for every guest, each followed by `extra(name)`.
    pub fn vm_tables(&self, extra: impl Fn(&str) -> String) -> String {
        self.guests
            .iter()
            .map(|(n, q)| format!("[[vm]]\nname = \"{n}\"\nqmp = {:?}\nagent = {:?}\n{}\n", q.qmp.display().to_string(), q.agent.display().to_string(), extra(n)))
            .collect()
    }

    /// Starts the daemon with `controller` (the `[controller]` table's keys) and `defaults`.
    pub fn daemon(&self, controller: &str, defaults: &str, extra: impl Fn(&str) -> String) -> Result<Daemon, String> {
        let config = format!("[controller]\n{controller}\n\n[defaults]\n{defaults}\n\n{}", self.vm_tables(extra));
        Daemon::start(&self.dir.join("daemon"), &config)
    }

    /// An error naming what died: the cgroup's OOM killer, or a QEMU.
    pub fn check_alive(&mut self) -> Result<(), String> {
        let kills = self.limit.oom_kills();
        if kills > 0 {
            return Err(format!("the cgroup's OOM killer ran {kills} times"));
        }
        match self.guests.iter_mut().find_map(|(n, q)| (!q.alive()).then_some(n)) {
            Some(n) => Err(format!("QEMU of {n} died")),
            None => Ok(()),
        }
    }

    /// OOM kills inside every guest.
    pub fn guest_oom_kills(&self) -> usize {
        self.guests.iter().map(|(_, q)| q.console.oom_kills()).sum()
    }
}

/// Every VM's size (MiB) from the daemon's status socket, sampled every 500 ms on a
/// thread, with the group's memory use and PSI, until stopped.
pub struct Recorder {
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
    pub rows: Arc<Mutex<Vec<Row>>>,
}

#[derive(Debug, Clone)]
pub struct Row {
    pub t: f64,
    pub sizes: BTreeMap<String, u64>,
    /// The daemon's last targets, MiB.
    pub targets: BTreeMap<String, u64>,
    /// Guest memory in use (size − MemAvailable) as the daemon last saw it, MiB.
    pub used: BTreeMap<String, u64>,
    pub classes: BTreeMap<String, String>,
    pub group_mib: Option<u64>,
    pub psi_some10: Option<f64>,
}

impl Row {
    pub fn total(&self) -> u64 {
        self.sizes.values().sum()
    }
    /// The sum of the targets (complete only once every VM has one).
    pub fn targets_total(&self) -> u64 {
        self.targets.values().sum()
    }
}

impl Recorder {
    pub fn start(status_socket: &Path, limit: &HostLimit) -> Recorder {
        let stop = Arc::new(AtomicBool::new(false));
        let rows = Arc::new(Mutex::new(Vec::new()));
        let (s, r, sock) = (stop.clone(), rows.clone(), status_socket.to_path_buf());
        let (usage, psi) = (limit.usage_file(), limit.pressure_file());
        let t0 = Instant::now();
        let thread = std::thread::spawn(move || {
            while !s.load(Ordering::SeqCst) {
                if let Ok(doc) = autoballoon::status_socket::query(&sock) {
                    let vms = doc["vms"].as_array().cloned().unwrap_or_default();
                    let sampled = |v: &serde_json::Value| v["samples"].as_u64().unwrap_or(0) > 0;
                    let sizes = vms.iter().filter(|v| sampled(v)).filter_map(|v| Some((v["name"].as_str()?.to_string(), v["size"].as_u64()? >> 10))).collect();
                    let mib = |key: &str| vms.iter().filter_map(|v| Some((v["name"].as_str()?.to_string(), v[key].as_u64()? >> 10))).collect();
                    let (targets, used) = (mib("target"), mib("used"));
                    let classes = vms.iter().filter_map(|v| Some((v["name"].as_str()?.to_string(), v["class"].as_str()?.to_string()))).collect();
                    let group_mib = std::fs::read_to_string(&usage).ok().and_then(|t| t.trim().parse::<u64>().ok()).map(|b| b >> 20);
                    let psi_some10 = std::fs::read_to_string(&psi).ok().and_then(|t| t.lines().next()?.split_whitespace().find_map(|w| w.strip_prefix("avg10="))?.parse().ok());
                    r.lock().unwrap().push(Row { t: t0.elapsed().as_secs_f64(), sizes, targets, used, classes, group_mib, psi_some10 });
                }
                std::thread::sleep(Duration::from_millis(500));
            }
        });
        Recorder { stop, thread: Some(thread), rows }
    }

    pub fn rows(&self) -> Vec<Row> {
        self.rows.lock().unwrap().clone()
    }

    pub fn since(&self, t: f64) -> Vec<Row> {
        self.rows().into_iter().filter(|r| r.t >= t).collect()
    }

    pub fn now(&self) -> f64 {
        self.rows().last().map_or(0.0, |r| r.t)
    }

    /// The rows as a table every `every` seconds, for the test's output.
    pub fn table(&self, every: f64) -> String {
        let rows = self.rows();
        let names: Vec<String> = rows.last().map(|r| r.sizes.keys().cloned().collect()).unwrap_or_default();
        let mut out = format!("{:>6} {} {:>6} {:>6} {:>6}\n", "t", names.iter().map(|n| format!("{n:>7}")).collect::<String>(), "sum", "group", "psi10");
        let mut next = 0.0;
        for r in rows {
            if r.t + 1e-9 < next {
                continue;
            }
            next = r.t + every;
            let cols: String = names.iter().map(|n| format!("{:>7}", r.sizes.get(n).map_or("-".into(), |s| s.to_string()))).collect();
            out.push_str(&format!("{:>6.1} {cols} {:>6} {:>6} {:>6}\n", r.t, r.total(), r.group_mib.map_or("-".into(), |g| g.to_string()), r.psi_some10.map_or("-".into(), |p| format!("{p:.1}"))));
        }
        out
    }
}

impl Drop for Recorder {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}
