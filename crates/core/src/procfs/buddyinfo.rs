use super::{malformed, ParseError};
use crate::units::Pages;

/// One line of /proc/buddyinfo: a zone's free blocks, counted by order (`free[k]` blocks
/// of 2^k pages each).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ZoneFree {
    pub node: u32,
    /// The zone's name as the kernel gives it (`DMA`, `DMA32`, `Normal`, `Movable`).
    pub zone: String,
    pub free: Vec<u64>,
}

/// /proc/buddyinfo: every zone's free blocks by order.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct BuddyInfo {
    pub zones: Vec<ZoneFree>,
}

impl BuddyInfo {
    /// Free pages in blocks of orders below `order`, over every zone: with `order` 9, the
    /// free memory in pieces under 2 MiB, which free page reporting does not report and a
    /// balloon inflating 2 MiB units does not take. Saturates (a hostile text cannot wrap).
    pub fn free_below_order(&self, order: u32) -> Pages {
        let pages = self.zones.iter().flat_map(|z| z.free.iter().enumerate().take(order as usize)).fold(0u64, |sum, (k, &n)| {
            sum.saturating_add(n.saturating_mul(1u64.checked_shl(k as u32).unwrap_or(u64::MAX)))
        });
        Pages(pages)
    }
}

/// Parses the text of /proc/buddyinfo: lines of `Node N, zone NAME c0 c1 ...`.
pub fn parse_buddyinfo(text: &str) -> Result<BuddyInfo, ParseError> {
    let mut zones = Vec::new();
    for (n, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let mut words = line.split_whitespace();
        let node = match (words.next(), words.next()) {
            (Some("Node"), Some(w)) => w.strip_suffix(',').and_then(|w| w.parse::<u32>().ok()),
            _ => None,
        };
        let (Some(node), Some("zone"), Some(zone)) = (node, words.next(), words.next()) else {
            return Err(malformed(n, "Node N, zone NAME counts", line));
        };
        let free = words.map(|w| w.parse::<u64>()).collect::<Result<Vec<_>, _>>().map_err(|_| malformed(n, "free block counts", line))?;
        // At most MAX_PAGE_ORDER + 1 orders (11 on x86; 64 leaves room for any config).
        if free.is_empty() || free.len() > 64 {
            return Err(malformed(n, "1 to 64 free block counts", line));
        }
        zones.push(ZoneFree { node, zone: zone.to_string(), free });
    }
    if zones.is_empty() {
        return Err(ParseError::Empty);
    }
    Ok(BuddyInfo { zones })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::procfs::fixtures;
    use proptest::prelude::*;

    #[test]
    fn counts_the_pieces_under_an_order() {
        let b = parse_buddyinfo("Node 0, zone      DMA      1      0      2 \nNode 0, zone    Normal   3   1   0   5\n").unwrap();
        assert_eq!(b.zones.len(), 2);
        assert_eq!((b.zones[1].node, b.zones[1].zone.as_str(), b.zones[1].free.clone()), (0, "Normal", vec![3, 1, 0, 5]));
        assert_eq!(b.free_below_order(0), Pages(0));
        assert_eq!(b.free_below_order(2), Pages(1 + 3 + 2));
        assert_eq!(b.free_below_order(9), Pages(1 + 2 * 4 + 3 + 2 + 5 * 8), "orders a zone does not list count nothing");
        let huge = parse_buddyinfo(&format!("Node 0, zone Normal {} {}\n", u64::MAX, u64::MAX)).unwrap();
        assert_eq!(huge.free_below_order(64), Pages(u64::MAX), "saturates");
    }

    #[test]
    fn bad_lines_are_errors() {
        for bad in ["Node 0 zone Normal 1\n", "Node x, zone Normal 1\n", "Node 0, zone Normal\n", "Node 0, zone Normal 1 -2\n", "Node 0, region Normal 1\n", "\n"] {
            assert!(parse_buddyinfo(bad).is_err(), "{bad:?}");
        }
        let long = format!("Node 0, zone Normal{}\n", " 1".repeat(65));
        assert!(parse_buddyinfo(&long).is_err());
    }

    #[test]
    fn every_fixture_parses() {
        let all = fixtures::all("buddyinfo");
        assert!(!all.is_empty(), "expected a fixture");
        for (source, text) in all {
            let b = parse_buddyinfo(&text).unwrap_or_else(|e| panic!("{source}: {e}"));
            assert!(b.zones.iter().any(|z| z.zone == "Normal" || z.zone == "DMA32"), "{source}");
            assert!(b.zones.iter().all(|z| z.free.len() == 11), "{source}: x86's orders 0-10");
        }
    }

    proptest! {
        #[test]
        fn never_panics(s in "\\PC*") {
            let _ = parse_buddyinfo(&s);
        }
    }
}
