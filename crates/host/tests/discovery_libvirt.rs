//! `[discovery] libvirt = true` with a fake `virsh` (its own test binary: the program is
//! named by `$AUTOBALLOON_VIRSH`, which the whole process sees): active domains come under
//! control under their names, and leave when they are no longer listed; a `[[vm]]` naming
//! the same domain wins.

mod common;

use autoballoon::config::Config;
use autoballoon_fakes::TempDir;
use common::*;
use std::os::unix::fs::PermissionsExt;
use std::time::Duration;

#[test]
fn active_libvirt_domains_come_and_go() {
    let dir = TempDir::new().unwrap();
    let list = dir.path().join("domains");
    std::fs::write(&list, "web-1\ndb-2\n\n").unwrap();
    // `virsh -c URI list --name` prints the list; anything else fails as for a domain
    // libvirt does not know (the actors retry, unreachable).
    let virsh = dir.path().join("virsh");
    let calls = dir.path().join("calls");
    let script = format!("#!/bin/sh\nif [ \"$3\" = list ]; then echo >> {calls:?}; cat {list:?}; exit 0; fi\necho \"error: failed to get domain '$4'\" >&2\nexit 1\n");
    let listings = || std::fs::read_to_string(&calls).map_or(0, |t| t.lines().count());
    std::fs::write(&virsh, script).unwrap();
    std::fs::set_permissions(&virsh, std::fs::Permissions::from_mode(0o755)).unwrap();
    std::env::set_var("AUTOBALLOON_VIRSH", &virsh);

    let text = "[controller]\ninterval_ms = 200\nmetrics_listen = ''\nstatus_socket = ''\n\
                [discovery]\nlibvirt = true\nlibvirt_uri = 'test:///fake'\n\
                [[vm]]\nname = 'db'\nlibvirt_domain = 'db-2'\nlibvirt_uri = 'test:///fake'\n";
    let d = Daemon::start_config(Config::parse(text).unwrap());
    let names = || {
        let mut n: Vec<String> = d.ctl().vms().iter().map(|v| v.name.clone()).collect();
        n.sort();
        n
    };
    wait_for(Duration::from_secs(10), "web-1 managed", || names() == ["db", "web-1"]);
    let added: Vec<_> = d.log.lines().into_iter().filter(|l| l["event"] == "vm_added").collect();
    assert_eq!(added.len(), 1, "{}", d.log.text());
    assert_eq!(added[0]["vm"], "web-1");
    assert!(added[0]["msg"].as_str().unwrap().contains("libvirt=web-1 on test:///fake"), "{}", added[0]);

    // No longer active: it leaves; the configured domain stays whatever the list says.
    std::fs::write(&list, "db-2\n").unwrap();
    wait_for(Duration::from_secs(10), "web-1 removed", || names() == ["db"]);
    let removed: Vec<_> = d.log.lines().into_iter().filter(|l| l["event"] == "vm_removed").collect();
    assert_eq!(removed.len(), 1, "{}", d.log.text());
    assert!(removed[0]["msg"].as_str().unwrap().contains("no longer active"), "{}", removed[0]);
    std::fs::write(&list, "").unwrap();
    let n = listings();
    wait_for(Duration::from_secs(10), "two more listings", || listings() >= n + 2);
    assert_eq!(names(), ["db"]);
}
