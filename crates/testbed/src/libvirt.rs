//! libvirt for tests: a reachable `qemu:///system` (the machine's libvirtd, or one started
//! here without systemd, stopped on drop), and transient TCG domains of the project's
//! guest image made from `docs/examples/autoballoon-guest.xml`.

use super::GuestImage;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

pub const URI: &str = "qemu:///system";

fn virsh(args: &[&str]) -> Result<String, String> {
    let out = Command::new("virsh").arg("-c").arg(URI).args(args).env("LC_ALL", "C").output().map_err(|e| format!("virsh: {e}"))?;
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        Err(format!("virsh {}: {}", args.join(" "), String::from_utf8_lossy(&out.stderr).trim()))
    }
}

fn on_path(program: &str) -> bool {
    Command::new("sh").args(["-c", &format!("command -v {program}")]).stdout(Stdio::null()).status().is_ok_and(|s| s.success())
}

/// A reachable libvirt; the daemons it started itself are stopped on drop.
pub struct Libvirt {
    started: Vec<Child>,
}

/// Why libvirt cannot be used at all (the caller skips) or failed (the caller fails).
#[derive(Debug)]
pub enum LibvirtError {
    /// Not installed: the test is skipped with this reason.
    Unavailable(String),
    /// Installed but not working: a failure.
    Broken(String),
}

impl Libvirt {
    /// `qemu:///system` answers: the machine's libvirtd if one runs, else `virtlogd` and
    /// `libvirtd` started here (no systemd needed), their logs under `logs`.
    pub fn ensure(logs: &Path) -> Result<Libvirt, LibvirtError> {
        for (program, package) in [("virsh", "libvirt-clients"), ("libvirtd", "libvirt-daemon"), ("virtlogd", "libvirt-daemon")] {
            if !on_path(program) && !Path::new("/usr/sbin").join(program).exists() {
                return Err(LibvirtError::Unavailable(format!("{program} is not installed (Debian's {package}; scripts/install-deps.sh installs it)")));
            }
        }
        if !Path::new("/usr/lib/x86_64-linux-gnu/libvirt/connection-driver/libvirt_driver_qemu.so").exists() && !Path::new("/usr/lib/libvirt/connection-driver/libvirt_driver_qemu.so").exists() {
            return Err(LibvirtError::Unavailable("libvirt's QEMU driver is not installed (Debian's libvirt-daemon-driver-qemu)".into()));
        }
        if virsh(&["list", "--name"]).is_ok() {
            return Ok(Libvirt { started: Vec::new() });
        }
        std::fs::create_dir_all(logs).map_err(|e| LibvirtError::Broken(e.to_string()))?;
        let mut lv = Libvirt { started: Vec::new() };
        for d in ["virtlogd", "libvirtd"] {
            let log = std::fs::File::create(logs.join(format!("{d}.log"))).map_err(|e| LibvirtError::Broken(e.to_string()))?;
            let program = if on_path(d) { PathBuf::from(d) } else { Path::new("/usr/sbin").join(d) };
            let child = Command::new(program).stdin(Stdio::null()).stdout(log.try_clone().map_err(|e| LibvirtError::Broken(e.to_string()))?).stderr(log).spawn().map_err(|e| LibvirtError::Broken(format!("{d}: {e}")))?;
            lv.started.push(child);
        }
        let mut last = String::new();
        let up = super::wait_for(Duration::from_secs(60), Duration::from_millis(250), || match virsh(&["list", "--name"]) {
            Ok(_) => true,
            Err(e) => {
                last = e;
                false
            }
        });
        if up.is_none() {
            let log = std::fs::read_to_string(logs.join("libvirtd.log")).unwrap_or_default();
            let errors: Vec<&str> = log.lines().filter(|l| l.contains(" error ")).collect();
            return Err(LibvirtError::Broken(format!("libvirtd started here did not answer within 60 s ({last}); its errors:\n{}", errors.join("\n"))));
        }
        Ok(lv)
    }

    /// Whether this test started libvirtd itself (no system one ran).
    pub fn started_here(&self) -> bool {
        !self.started.is_empty()
    }
}

impl Drop for Libvirt {
    fn drop(&mut self) {
        for c in self.started.iter_mut().rev() {
            // SAFETY: kill(2) on our own child's pid.
            unsafe { libc::kill(c.id() as i32, libc::SIGTERM) };
            if super::wait_for(Duration::from_secs(10), Duration::from_millis(50), || matches!(c.try_wait(), Ok(Some(_)))).is_none() {
                let _ = c.kill();
            }
            let _ = c.wait();
        }
    }
}

/// A transient domain (`virsh create`), destroyed on drop, with its files in `dir`.
pub struct TransientDomain {
    pub name: String,
    pub dir: PathBuf,
    /// The guest's console (the domain's unix serial socket).
    pub serial: PathBuf,
    /// The agent channel's socket, as the XML declares it.
    pub agent: PathBuf,
}

/// The example domain XML of the docs with this name, size, image and socket directory.
pub fn domain_xml(name: &str, memory_mib: u64, image_dir: &Path, sockets: &Path) -> Result<String, String> {
    let example = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/examples/autoballoon-guest.xml");
    let xml = std::fs::read_to_string(&example).map_err(|e| format!("{}: {e}", example.display()))?;
    let body = xml.find("<domain").map(|i| &xml[i..]).ok_or("no <domain> in the example")?;
    Ok(body
        .replace("<name>autoballoon-guest</name>", &format!("<name>{name}</name>"))
        .replace("<memory unit='MiB'>1024</memory>", &format!("<memory unit='MiB'>{memory_mib}</memory>"))
        .replace("<currentMemory unit='MiB'>1024</currentMemory>", &format!("<currentMemory unit='MiB'>{memory_mib}</currentMemory>"))
        .replace("/var/lib/autoballoon/image", &image_dir.display().to_string())
        .replace("/run/autoballoon-vms/autoballoon-guest", &sockets.join(name).display().to_string()))
}

impl TransientDomain {
    /// Copies the image where libvirt's QEMU user can read it, and creates the domain.
    /// `dir` must be reachable by that user (e.g. under /tmp).
    pub fn create(name: &str, memory_mib: u64, image: &GuestImage, dir: &Path) -> Result<TransientDomain, String> {
        let _ = virsh(&["destroy", name]);
        let _ = std::fs::remove_dir_all(dir);
        let (img, socks) = (dir.join("image"), dir.join("sockets"));
        for d in [&img, &socks] {
            std::fs::create_dir_all(d).map_err(|e| format!("{}: {e}", d.display()))?;
        }
        use std::os::unix::fs::PermissionsExt;
        let perm = |p: &Path, mode: u32| std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode)).map_err(|e| format!("{}: {e}", p.display()));
        perm(dir, 0o755)?;
        perm(&img, 0o755)?;
        // QEMU runs as libvirt-qemu and creates the sockets here.
        perm(&socks, 0o1777)?;
        for f in ["vmlinuz", "initrd.img"] {
            std::fs::copy(image.dir.join(f), img.join(f)).map_err(|e| format!("copying {f}: {e}"))?;
            perm(&img.join(f), 0o644)?;
        }
        let xml = domain_xml(name, memory_mib, &img, &socks)?;
        let file = dir.join("domain.xml");
        std::fs::write(&file, &xml).map_err(|e| e.to_string())?;
        virsh(&["create", &file.display().to_string()])?;
        Ok(TransientDomain { name: name.into(), dir: dir.into(), serial: socks.join(format!("{name}.serial")), agent: socks.join(format!("{name}.agent")) })
    }

    /// `virsh dommemstat`'s `actual`, KiB.
    pub fn actual_kib(&self) -> Option<u64> {
        let out = virsh(&["dommemstat", &self.name]).ok()?;
        out.lines().find_map(|l| l.strip_prefix("actual ")).and_then(|v| v.trim().parse().ok())
    }

    /// The QEMU process' pid (libvirt's pid file).
    pub fn pid(&self) -> Option<u32> {
        std::fs::read_to_string(format!("/run/libvirt/qemu/{}.pid", self.name)).ok()?.trim().parse().ok()
    }
}

impl Drop for TransientDomain {
    fn drop(&mut self) {
        let _ = virsh(&["destroy", &self.name]);
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
