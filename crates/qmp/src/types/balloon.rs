//! The balloon: `query-balloon`, `query-memory-size-summary` (the size the
//! balloon can give back) and the guest statistics read with
//! `qom-get <device> guest-stats`.

use serde_json::Value;

use super::frame::shape_error;
use crate::error::QmpError;

/// Parses the `return` of `query-balloon` (`{"actual": bytes}`): the guest's
/// current logical memory size in bytes (RAM size minus the balloon).
pub fn parse_balloon_info(ret: &Value) -> Result<u64, QmpError> {
    ret.get("actual")
        .and_then(Value::as_u64)
        .ok_or_else(|| shape_error("query-balloon", "no unsigned \"actual\"", ret))
}

/// Parses the `return` of `query-memory-size-summary`
/// (`{"base-memory": bytes, "plugged-memory": bytes}`): the VM's configured
/// RAM in bytes, boot memory plus hot-plugged memory. This is the size
/// `query-balloon` reports while the balloon is empty.
pub fn parse_memory_size_summary(ret: &Value) -> Result<u64, QmpError> {
    let base = ret
        .get("base-memory")
        .and_then(Value::as_u64)
        .ok_or_else(|| {
            shape_error(
                "query-memory-size-summary",
                "no unsigned \"base-memory\"",
                ret,
            )
        })?;
    let plugged = ret
        .get("plugged-memory")
        .and_then(Value::as_u64)
        .unwrap_or(0);
    base.checked_add(plugged)
        .ok_or_else(|| shape_error("query-memory-size-summary", "size overflows u64", ret))
}

/// The virtio-balloon guest statistics, from `qom-get <device> guest-stats`.
///
/// Each field is `None` when the guest has not reported it: QEMU reports
/// such stats as `u64::MAX` (its internal `-1`), which is mapped to `None`.
/// Sizes are in bytes (the Linux driver converts pages to bytes), faults and
/// hugetlb fields are event counts since guest boot.
///
/// Note: with a stock device `total_memory_bytes` (MemTotal) shrinks as the
/// balloon inflates; with `deflate-on-oom=on` it does not.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct GuestStats {
    /// `stat-swap-in`: bytes swapped in.
    pub swap_in_bytes: Option<u64>,
    /// `stat-swap-out`: bytes swapped out.
    pub swap_out_bytes: Option<u64>,
    /// `stat-major-faults`: number of major page faults.
    pub major_faults: Option<u64>,
    /// `stat-minor-faults`: number of minor page faults.
    pub minor_faults: Option<u64>,
    /// `stat-free-memory`: MemFree, bytes.
    pub free_memory_bytes: Option<u64>,
    /// `stat-total-memory`: MemTotal, bytes.
    pub total_memory_bytes: Option<u64>,
    /// `stat-available-memory`: MemAvailable, bytes.
    pub available_memory_bytes: Option<u64>,
    /// `stat-disk-caches`: page cache, bytes.
    pub disk_caches_bytes: Option<u64>,
    /// `stat-htlb-pgalloc`: successful hugetlb page allocations.
    pub hugetlb_allocations: Option<u64>,
    /// `stat-htlb-pgfail`: failed hugetlb page allocations.
    pub hugetlb_failures: Option<u64>,
    /// `stat-oom-kills` (QEMU 9.1+, guest kernel 6.12+; absent from QEMU
    /// 7.2): OOM kills in the guest since boot.
    pub oom_kills: Option<u64>,
    /// `stat-alloc-stalls` (QEMU 9.1+, guest kernel 6.12+): allocation stalls.
    pub alloc_stalls: Option<u64>,
    /// `stat-async-scans` (QEMU 9.1+, guest kernel 6.12+): pages scanned by kswapd.
    pub async_scans: Option<u64>,
    /// `stat-direct-scans` (QEMU 9.1+, guest kernel 6.12+): pages scanned by direct reclaim.
    pub direct_scans: Option<u64>,
    /// `stat-async-reclaims` (QEMU 9.1+, guest kernel 6.12+): pages reclaimed by kswapd.
    pub async_reclaims: Option<u64>,
    /// `stat-direct-reclaims` (QEMU 9.1+, guest kernel 6.12+): pages reclaimed directly.
    pub direct_reclaims: Option<u64>,
    /// `last-update`: host time (Unix epoch seconds) of the last sample;
    /// `None` if the guest never sent one (QEMU reports 0).
    pub last_update_epoch_secs: Option<u64>,
}

/// Parses the value of the `guest-stats` QOM property
/// (`{"stats": {"stat-...": n, ...}, "last-update": secs}`).
pub fn parse_guest_stats(value: &Value) -> Result<GuestStats, QmpError> {
    let stats = value
        .get("stats")
        .and_then(Value::as_object)
        .ok_or_else(|| shape_error("qom-get guest-stats", "no \"stats\" object", value))?;
    let stat = |key: &str| {
        stats
            .get(key)
            .and_then(Value::as_u64)
            .filter(|&n| n != u64::MAX)
    };
    Ok(GuestStats {
        swap_in_bytes: stat("stat-swap-in"),
        swap_out_bytes: stat("stat-swap-out"),
        major_faults: stat("stat-major-faults"),
        minor_faults: stat("stat-minor-faults"),
        free_memory_bytes: stat("stat-free-memory"),
        total_memory_bytes: stat("stat-total-memory"),
        available_memory_bytes: stat("stat-available-memory"),
        disk_caches_bytes: stat("stat-disk-caches"),
        hugetlb_allocations: stat("stat-htlb-pgalloc"),
        hugetlb_failures: stat("stat-htlb-pgfail"),
        oom_kills: stat("stat-oom-kills"),
        alloc_stalls: stat("stat-alloc-stalls"),
        async_scans: stat("stat-async-scans"),
        direct_scans: stat("stat-direct-scans"),
        async_reclaims: stat("stat-async-reclaims"),
        direct_reclaims: stat("stat-direct-reclaims"),
        last_update_epoch_secs: value
            .get("last-update")
            .and_then(Value::as_u64)
            .filter(|&n| n != 0),
    })
}

#[cfg(test)]
mod tests {
    use super::super::samples::v;
    use super::*;
    use serde_json::json;

    // Verbatim from QEMU 7.2.22 transcripts (see tests/fixtures).
    const GUEST_STATS: &str = r#"{"stats": {"stat-htlb-pgalloc": 0, "stat-swap-out": 0, "stat-available-memory": 3944198144, "stat-htlb-pgfail": 0, "stat-free-memory": 4062744576, "stat-minor-faults": 512, "stat-major-faults": 0, "stat-total-memory": 4105621504, "stat-swap-in": 0, "stat-disk-caches": 3035136}, "last-update": 1795274835}"#;
    const GUEST_STATS_NO_DRIVER: &str = r#"{"stats": {"stat-htlb-pgalloc": 18446744073709551615, "stat-swap-out": 18446744073709551615, "stat-available-memory": 18446744073709551615, "stat-htlb-pgfail": 18446744073709551615, "stat-free-memory": 18446744073709551615, "stat-minor-faults": 18446744073709551615, "stat-major-faults": 18446744073709551615, "stat-total-memory": 18446744073709551615, "stat-swap-in": 18446744073709551615, "stat-disk-caches": 18446744073709551615}, "last-update": 0}"#;

    #[test]
    fn balloon_info() {
        assert_eq!(
            parse_balloon_info(&json!({"actual": 4294967296u64})).unwrap(),
            4 << 30
        );
        assert!(matches!(
            parse_balloon_info(&json!({})),
            Err(QmpError::Protocol(_))
        ));
        assert!(matches!(
            parse_balloon_info(&json!({"actual": -1})),
            Err(QmpError::Protocol(_))
        ));
    }

    #[test]
    fn memory_size_summary() {
        // QEMU 7.2, -m 256M.
        let v = v(r#"{"base-memory": 268435456, "plugged-memory": 0}"#);
        assert_eq!(parse_memory_size_summary(&v).unwrap(), 256 << 20);
        assert_eq!(
            parse_memory_size_summary(&json!({"base-memory": 1024, "plugged-memory": 512}))
                .unwrap(),
            1536
        );
        assert_eq!(
            parse_memory_size_summary(&json!({"base-memory": 1024})).unwrap(),
            1024
        );
        assert!(parse_memory_size_summary(&json!({"plugged-memory": 1})).is_err());
        assert!(
            parse_memory_size_summary(&json!({"base-memory": u64::MAX, "plugged-memory": 1}))
                .is_err()
        );
    }

    #[test]
    fn guest_stats() {
        let s = parse_guest_stats(&v(GUEST_STATS)).unwrap();
        assert_eq!(
            s,
            GuestStats {
                swap_in_bytes: Some(0),
                swap_out_bytes: Some(0),
                major_faults: Some(0),
                minor_faults: Some(512),
                free_memory_bytes: Some(4062744576),
                total_memory_bytes: Some(4105621504),
                available_memory_bytes: Some(3944198144),
                disk_caches_bytes: Some(3035136),
                hugetlb_allocations: Some(0),
                hugetlb_failures: Some(0),
                last_update_epoch_secs: Some(1795274835),
                ..GuestStats::default()
            }
        );
        // No guest driver yet (QEMU -S): every stat is u64::MAX, last-update 0.
        assert_eq!(
            parse_guest_stats(&v(GUEST_STATS_NO_DRIVER)).unwrap(),
            GuestStats::default()
        );
        // Partial and odd values are tolerated, a missing "stats" object is not.
        let partial =
            parse_guest_stats(&json!({"stats": {"stat-free-memory": 5, "stat-swap-in": "x"}}))
                .unwrap();
        assert_eq!(partial.free_memory_bytes, Some(5));
        assert_eq!(partial.swap_in_bytes, None);
        assert_eq!(partial.last_update_epoch_secs, None);
        assert!(matches!(
            parse_guest_stats(&json!({})),
            Err(QmpError::Protocol(_))
        ));
        assert!(parse_guest_stats(&json!(3)).is_err());
    }
}
