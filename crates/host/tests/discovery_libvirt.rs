//! `[discovery] libvirt = true` against libvirt's test driver (`test:///default`, built into
//! libvirt0: no daemon): active domains come under control under their names, and leave
//! when they are no longer active; a `[[vm]]` naming the same domain wins. Within one
//! process, the connections to `test:///default` share one state while any is open: the
//! test holds one, and starts and destroys the domains the daemon lists through its own.

mod common;

use autoballoon::config::Config;
use common::*;
use std::time::Duration;

const URI: &str = "test:///default";

fn start(conn: &virt::connect::Connect, name: &str) -> virt::domain::Domain {
    let xml = format!("<domain type='test'><name>{name}</name><memory unit='MiB'>512</memory><os><type>hvm</type></os><devices><memballoon model='virtio'/></devices></domain>");
    conn.create_domain_xml(&xml, 0).unwrap_or_else(|e| panic!("create {name}: {e}"))
}

#[test]
fn active_libvirt_domains_come_and_go() {
    let conn = virt::connect::Connect::open(Some(URI)).unwrap();
    // The driver's own running domain `test`: out of the way.
    conn.lookup_domain_by_name("test").unwrap().destroy().unwrap();
    let web = start(&conn, "web-1");
    let db = start(&conn, "db-2");

    let text = format!(
        "[controller]\ninterval_ms = 200\nmetrics_listen = ''\nstatus_socket = ''\n\
         [discovery]\nlibvirt = true\nlibvirt_uri = '{URI}'\n\
         [[vm]]\nname = 'db'\nlibvirt_domain = 'db-2'\nlibvirt_uri = '{URI}'\n"
    );
    let d = Daemon::start_config(Config::parse(&text).unwrap());
    let names = || {
        let mut n: Vec<String> = d.ctl().vms().iter().map(|v| v.name.clone()).collect();
        n.sort();
        n
    };
    wait_for(Duration::from_secs(10), "web-1 managed", || names() == ["db", "web-1"]);
    let added: Vec<_> = d.log.lines().into_iter().filter(|l| l["event"] == "vm_added").collect();
    assert_eq!(added.len(), 1, "{}", d.log.text());
    assert_eq!(added[0]["vm"], "web-1");
    assert!(added[0]["msg"].as_str().unwrap().contains("libvirt=web-1 on test:///default"), "{}", added[0]);
    // Both are managed through the library: their sessions begin (one line each).
    wait_for(Duration::from_secs(10), "both sessions", || {
        let lines = d.log.lines();
        ["db", "web-1"].iter().all(|vm| lines.iter().any(|l| l["vm"] == *vm && l["msg"].as_str().is_some_and(|m| m.starts_with("managing libvirt="))))
    });

    // No longer active: it leaves; the configured domain stays whatever the list says.
    web.destroy().unwrap();
    wait_for(Duration::from_secs(10), "web-1 removed", || names() == ["db"]);
    let removed: Vec<_> = d.log.lines().into_iter().filter(|l| l["event"] == "vm_removed").collect();
    assert_eq!(removed.len(), 1, "{}", d.log.text());
    assert!(removed[0]["msg"].as_str().unwrap().contains("no longer active"), "{}", removed[0]);
    db.destroy().unwrap();
    // Two more listings (one every LIBVIRT_SCAN, 2 s).
    std::thread::sleep(Duration::from_millis(4500));
    assert_eq!(names(), ["db"]);
}
