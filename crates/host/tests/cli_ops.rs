//! The daemon's operations as shipped: `--check-config`, SIGHUP reloads (valid, invalid,
//! changes that need a restart), and the endpoints' life cycle with the process.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

fn tmp(name: &str) -> PathBuf {
    let d = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("ops-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn run(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_autoballoon")).args(args).output().unwrap();
    (out.status.code().unwrap_or(-1), String::from_utf8_lossy(&out.stdout).into_owned(), String::from_utf8_lossy(&out.stderr).into_owned())
}

#[test]
fn check_config_summarises_a_valid_file_and_exits_2_on_an_invalid_one() {
    let example = concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/example-host.toml");
    let (code, out, err) = run(&["host", "--check-config", "--config", example]);
    assert_eq!(code, 0, "{err}");
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 6, "{out}");
    assert!(lines[0].starts_with("controller: interval_ms=1000 log_format=text log_level=info metrics_listen=127.0.0.1:9848 status_socket=/run/autoballoon/status.sock"), "{out}");
    assert_eq!(lines[1], "discovery: off; matches (first wins): \"db-*\"", "{out}");
    assert!(lines[2].starts_with("web1: qmp=/run/autoballoon/web1.qmp agent=/run/autoballoon/web1.agent policy=swapfree buffer=64 MiB"), "{out}");
    assert!(lines[3].starts_with("db1: qmp=/run/autoballoon/db1.qmp agent=none (guest-stats) policy=swapfree buffer=128 MiB min=512 MiB ([defaults] with its [vm.policy])"), "{out}");
    assert!(lines[4].starts_with("guest1: libvirt=autoballoon-guest on qemu:///system agent=from the domain XML policy=swapfree"), "{out}");
    assert_eq!(lines[5], "configuration OK: 3 VM(s)");

    let dir = tmp("check");
    let bad = dir.join("bad.toml");
    std::fs::write(&bad, "[controller]\nmetrics_listen = 'localhost'\n[[vm]]\nname='a'\nqmp='/a'\n").unwrap();
    let (code, out, err) = run(&["host", "--check-config", "--config", bad.to_str().unwrap()]);
    assert_eq!(code, 2);
    assert!(out.is_empty());
    assert!(err.contains("controller.metrics_listen"), "{err}");
    std::fs::write(&bad, "[controller]\nstatus_socket = 'relative.sock'\n[[vm]]\nname='a'\nqmp='/a'\n").unwrap();
    let (code, _, err) = run(&["host", "--check-config", "--config", bad.to_str().unwrap()]);
    assert_eq!(code, 2);
    assert!(err.contains("controller.status_socket"), "{err}");
    // Flags override the file's keys, and are checked the same way.
    let (code, _, err) = run(&["host", "--check-config", "--config", example, "--metrics-listen", "nope"]);
    assert_eq!(code, 2);
    assert!(err.contains("controller.metrics_listen"), "{err}");
}

struct Daemon {
    child: Child,
    log: PathBuf,
}

impl Daemon {
    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
    fn wait_log(&self, what: &str, timeout: Duration) -> String {
        let t = Instant::now();
        loop {
            let l = self.log();
            if l.contains(what) {
                return l;
            }
            assert!(t.elapsed() < timeout, "no {what:?} in the daemon's log within {timeout:?}:\n{l}");
            std::thread::sleep(Duration::from_millis(50));
        }
    }
    fn signal(&self, sig: libc::c_int) {
        // SAFETY: signalling our own child.
        assert_eq!(unsafe { libc::kill(self.child.id() as libc::pid_t, sig) }, 0);
    }
    fn stop(mut self) -> std::process::ExitStatus {
        self.signal(libc::SIGTERM);
        let t = Instant::now();
        loop {
            if let Some(s) = self.child.try_wait().unwrap() {
                return s;
            }
            assert!(t.elapsed() < Duration::from_secs(20), "the daemon did not stop");
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn config(dir: &std::path::Path, controller_extra: &str, vms: &[&str]) -> String {
    let mut s = format!(
        "[controller]\nmetrics_listen = \"127.0.0.1:0\"\nstatus_socket = {:?}\n{controller_extra}\n",
        dir.join("status.sock").to_str().unwrap()
    );
    for v in vms {
        s.push_str(&format!("[[vm]]\nname = {v:?}\nqmp = {:?}\n", dir.join(format!("{v}.qmp")).to_str().unwrap()));
    }
    s
}

#[test]
fn sighup_reloads_log_settings_keeps_running_on_a_bad_file_and_names_what_needs_a_restart() {
    let dir = tmp("hup");
    let cfg = dir.join("host.toml");
    std::fs::write(&cfg, config(&dir, "interval_ms = 200", &["a", "b"])).unwrap();
    let log = dir.join("daemon.log");
    let child = Command::new(env!("CARGO_BIN_EXE_autoballoon"))
        .args(["host", "--config", cfg.to_str().unwrap()])
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .unwrap();
    let d = Daemon { child, log };
    d.wait_log("status socket", Duration::from_secs(10));
    let l = d.wait_log("metrics on http://127.0.0.1:", Duration::from_secs(10));
    assert!(!l.contains("ERROR"), "{l}");
    let sock = dir.join("status.sock");
    assert!(sock.exists());

    // An invalid file: logged, the daemon goes on with the old configuration.
    std::fs::write(&cfg, "[controller]\ninterval_ms = 5\n").unwrap();
    d.signal(libc::SIGHUP);
    let l = d.wait_log("reload failed, keeping the running configuration", Duration::from_secs(10));
    assert!(l.contains("controller.interval_ms"), "{l}");
    let (code, out, err) = run(&["status", "--socket", sock.to_str().unwrap()]);
    assert_eq!(code, 0, "still serving after a bad reload: {err}");
    assert!(out.contains("\na ") && out.contains("\nb "), "{out}");

    // A valid file: JSON logs from now on, a VM added and one removed at once; the interval
    // changed needs a restart, and says so.
    std::fs::write(&cfg, config(&dir, "log_format = \"json\"\ninterval_ms = 300", &["a", "c"])).unwrap();
    d.signal(libc::SIGHUP);
    let l = d.wait_log("\"event\":\"reload\"", Duration::from_secs(10));
    let line = l.lines().find(|x| x.contains("\"event\":\"reload\"")).unwrap();
    let v: serde_json::Value = serde_json::from_str(line).unwrap();
    assert_eq!(v["ok"], true, "{line}");
    assert_eq!(v["applied"], serde_json::json!(["log settings", "vm \"b\" removed", "vm \"c\" added"]), "{line}");
    assert_eq!(v["restart_needed"], serde_json::json!(["controller.interval_ms"]), "{line}");
    assert!(v["msg"].as_str().unwrap().contains("RESTART NEEDED"), "{line}");
    // The running set of VMs is the file's.
    let (_, out, _) = run(&["status", "--json", "--socket", sock.to_str().unwrap()]);
    let names: Vec<String> = serde_json::from_str::<serde_json::Value>(&out).unwrap().as_array().unwrap().iter().map(|v| v["name"].as_str().unwrap().to_string()).collect();
    assert_eq!(names, ["a", "c"]);

    // A second SIGHUP with the same file still names the keys not in force.
    d.signal(libc::SIGHUP);
    let t = Instant::now();
    while d.log().matches("\"event\":\"reload\"").count() < 2 {
        assert!(t.elapsed() < Duration::from_secs(10), "{}", d.log());
        std::thread::sleep(Duration::from_millis(50));
    }
    let l = d.log();
    let last = l.lines().rfind(|x| x.contains("\"event\":\"reload\"")).unwrap();
    assert!(last.contains("nothing to apply") && last.contains("RESTART NEEDED"), "{last}");

    let status = d.stop();
    assert!(status.success(), "{status:?}");
    assert!(!sock.exists(), "the status socket is removed on exit");
}
