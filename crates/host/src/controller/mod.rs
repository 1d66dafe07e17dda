//! The host controller: one worker thread per QEMU VM, each running the core control loop
//! with a QMP/agent source and a QMP actuator. A VM whose QEMU dies or whose socket
//! vanishes is logged and retried with back-off; the others go on.

mod agent_link;
mod status;
mod vm;

pub use agent_link::AgentLink;
pub use status::{Point, VmState, VmStatus};
pub use vm::{VmCommand, VmWorker};

use crate::config::{Config, VmConfig};
use crate::log::Logger;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::Sender;
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

/// A running VM worker, as seen from outside: its status and a way to steer it.
pub struct VmHandle {
    pub name: String,
    pub status: Arc<Mutex<VmStatus>>,
    commands: Sender<VmCommand>,
    thread: Option<JoinHandle<()>>,
}

impl VmHandle {
    pub fn snapshot(&self) -> VmStatus {
        self.status.lock().unwrap().clone()
    }
    /// Sends a command; false if the worker is gone.
    pub fn command(&self, c: VmCommand) -> bool {
        self.commands.send(c).is_ok()
    }
}

pub struct Controller {
    pub vms: Vec<VmHandle>,
    shutdown: Arc<AtomicBool>,
}

impl Controller {
    /// Starts one worker per configured VM.
    pub fn start(config: &Config, logger: Logger) -> Controller {
        let shutdown = Arc::new(AtomicBool::new(false));
        let interval = Duration::from_millis(config.controller.interval_ms);
        let vms = config.vms.iter().map(|vm| Self::spawn(vm, config, interval, logger.clone(), shutdown.clone())).collect();
        Controller { vms, shutdown }
    }

    fn spawn(vm: &VmConfig, config: &Config, interval: Duration, logger: Logger, shutdown: Arc<AtomicBool>) -> VmHandle {
        let (tx, rx) = std::sync::mpsc::channel();
        let worker = VmWorker::new(vm.clone(), config.policy_for(vm), interval, logger, rx, shutdown);
        let status = worker.status();
        let thread = std::thread::Builder::new()
            .name(format!("vm-{}", vm.name))
            .spawn(move || worker.run())
            .expect("spawning a thread");
        VmHandle { name: vm.name.clone(), status, commands: tx, thread: Some(thread) }
    }

    pub fn vm(&self, name: &str) -> Option<&VmHandle> {
        self.vms.iter().find(|v| v.name == name)
    }

    pub fn shutdown_flag(&self) -> Arc<AtomicBool> {
        self.shutdown.clone()
    }

    /// Stops every worker and waits for them.
    pub fn stop(mut self) {
        self.shutdown.store(true, Ordering::SeqCst);
        for v in &mut self.vms {
            let _ = v.commands.send(VmCommand::Wake);
            if let Some(t) = v.thread.take() {
                let _ = t.join();
            }
        }
    }
}
