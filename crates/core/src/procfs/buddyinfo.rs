use super::{malformed, ParseError};
use crate::units::Pages;

/// /proc/buddyinfo: the page allocator's free blocks, per zone and order (a block of order
/// `k` is `2^k` pages).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Buddyinfo {
    zones: Vec<Zone>,
}

/// One line of /proc/buddyinfo.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Zone {
    pub node: u32,
    pub name: String,
    /// Free blocks of each order, from order 0.
    pub free_blocks: Vec<u64>,
}

impl Buddyinfo {
    /// The order of the blocks virtio-balloon's free page hinting takes
    /// (`VIRTIO_BALLOON_HINT_BLOCK_ORDER`: `MAX_ORDER - 1` before Linux 6.4,
    /// `MAX_PAGE_ORDER` since; 10 on x86, 4 MiB).
    pub const HINT_ORDER: usize = 10;

    pub fn zones(&self) -> &[Zone] {
        &self.zones
    }

    /// Free pages in blocks of `order` or larger, in every zone but DMA (the lowest zone,
    /// which `lowmem_reserve` keeps from ordinary allocations such as hinting's). Saturates.
    pub fn free_in_blocks_saturating(&self, order: usize) -> Pages {
        let pages = self.zones.iter().filter(|z| z.name != "DMA").flat_map(|z| z.free_blocks.iter().enumerate().skip(order)).fold(0u64, |sum, (k, n)| {
            let block = u32::try_from(k).ok().and_then(|k| 1u64.checked_shl(k)).unwrap_or(u64::MAX);
            sum.saturating_add(n.saturating_mul(block))
        });
        Pages(pages)
    }
}

/// Parses the text of /proc/buddyinfo: lines of `Node N, zone NAME c0 c1 …`.
pub fn parse_buddyinfo(text: &str) -> Result<Buddyinfo, ParseError> {
    const EXPECTED: &str = "Node N, zone NAME count…";
    let mut zones = Vec::new();
    for (n, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let mut words = line.split_whitespace();
        let (Some("Node"), Some(node), Some("zone"), Some(name)) = (words.next(), words.next(), words.next(), words.next()) else {
            return Err(malformed(n, EXPECTED, line));
        };
        let Some(node) = node.strip_suffix(',').and_then(|v| v.parse().ok()) else {
            return Err(malformed(n, EXPECTED, line));
        };
        let free_blocks = words.map(str::parse).collect::<Result<Vec<u64>, _>>().map_err(|_| malformed(n, "a count of free blocks", line))?;
        if free_blocks.is_empty() {
            return Err(malformed(n, EXPECTED, line));
        }
        zones.push(Zone { node, name: name.to_string(), free_blocks });
    }
    if zones.is_empty() {
        return Err(ParseError::Empty);
    }
    Ok(Buddyinfo { zones })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::procfs::fixtures;

    #[test]
    fn every_zone_of_a_real_guest_and_host() {
        for (dir, zones) in [("linux-6.1-guest-fresh", 2), ("linux-6.1-guest-ballooned", 2), ("host-6.18-buddy", 3)] {
            let b = parse_buddyinfo(&fixtures::read(dir, "buddyinfo")).unwrap_or_else(|e| panic!("{dir}: {e}"));
            assert_eq!(b.zones().len(), zones, "{dir}");
            assert!(b.zones().iter().all(|z| z.free_blocks.len() == Buddyinfo::HINT_ORDER + 1), "{dir}: orders 0 to 10");
        }
    }

    #[test]
    fn free_blocks_count_from_an_order_up_without_dma() {
        let text = "Node 0, zone      DMA      0      0      0      0      0      0      0      0      1      1      3 \n\
                    Node 0, zone    DMA32      2      2      4      1      2      2      1      4      5      3    751 \n\
                    Node 0, zone   Normal  13538   7767   4694   2740   1742   1516    848    535    431    363   1475 \n";
        let b = parse_buddyinfo(text).unwrap();
        assert_eq!(b.free_in_blocks_saturating(10), Pages((751 + 1475) * 1024));
        assert_eq!(b.free_in_blocks_saturating(9), Pages((751 + 1475) * 1024 + (3 + 363) * 512));
        assert_eq!(b.free_in_blocks_saturating(11), Pages(0), "no order above the last");
        let zero = b.free_in_blocks_saturating(0).0;
        assert!(zero > b.free_in_blocks_saturating(10).0);
    }

    #[test]
    fn a_ballooned_guest_holds_less_in_whole_blocks_than_it_has_free() {
        let idle = parse_buddyinfo(&fixtures::read("linux-6.1-guest-fresh", "buddyinfo")).unwrap();
        let ballooned = parse_buddyinfo(&fixtures::read("linux-6.1-guest-ballooned", "buddyinfo")).unwrap();
        let whole = |b: &Buddyinfo| b.free_in_blocks_saturating(Buddyinfo::HINT_ORDER).0;
        let all = |b: &Buddyinfo| b.free_in_blocks_saturating(0).0;
        assert!(whole(&idle) * 10 > all(&idle) * 9, "a fresh guest's free memory lies in whole blocks");
        assert!(whole(&ballooned) < all(&ballooned), "a ballooned guest's does not, all of it");
        assert_eq!(whole(&ballooned), 31 * 1024, "124 MiB in whole blocks, none counted from DMA");
    }

    #[test]
    fn bad_lines_are_named() {
        for bad in ["", "Node 0, zone Normal", "Node x, zone Normal 1 2", "Zone 0, node Normal 1", "Node 0, zone Normal 1 -2"] {
            assert!(parse_buddyinfo(bad).is_err(), "{bad:?}");
        }
        let e = parse_buddyinfo("Node 0, zone DMA 1 2\nNode 0, zone Normal 1 x\n").unwrap_err();
        assert!(matches!(e, ParseError::Malformed { line: 2, .. }), "{e:?}");
    }

    #[test]
    fn huge_counts_saturate() {
        let b = parse_buddyinfo(&format!("Node 0, zone Normal 0 0 0 0 0 0 0 0 0 0 {}\n", u64::MAX)).unwrap();
        assert_eq!(b.free_in_blocks_saturating(10), Pages(u64::MAX));
    }
}
