//! The line framer: any cutting of the same bytes gives the same lines, each within the
//! bound and without a newline, and what is held stays within the bound.
#![no_main]
use autoballoon_core::lines::{Framed, LineFramer};
use libfuzzer_sys::fuzz_target;

fn frame(max: usize, chunks: &[&[u8]]) -> (Vec<Framed>, Option<Vec<u8>>) {
    let mut f = LineFramer::new(max);
    let mut out = Vec::new();
    for c in chunks {
        out.extend(f.push(c));
        assert!(f.pending() <= max);
    }
    (out, f.finish())
}

fuzz_target!(|data: &[u8]| {
    // The first byte: the bound; the second: the chunk size; the rest: the stream.
    let (Some(&max), Some(&step)) = (data.first(), data.get(1)) else { return };
    let (max, stream) = (max as usize % 64, &data[2..]);
    let whole = frame(max, &[stream]);
    for line in whole.0.iter().flatten() {
        assert!(line.len() <= max && !line.contains(&b'\n'));
    }
    let chunks: Vec<&[u8]> = stream.chunks(step as usize % 17 + 1).collect();
    assert_eq!(frame(max, &chunks), whole);
});
