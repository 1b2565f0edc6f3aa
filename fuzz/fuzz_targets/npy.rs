//! Arbitrary bytes as a `.npy` file through `tcc::npy::read_bytes`: it never panics
//! and never allocates absurdly (run with `-rss_limit_mb=2048`: a header may promise
//! any shape, the data behind it is at most the input); an array it accepts has as
//! many elements as its shape says, and `write_bytes` then `read_bytes` gives back
//! the same shape, element type and values (bit for bit; NaN as NaN).
#![no_main]

use libfuzzer_sys::fuzz_target;
use tcc::npy::{read_bytes, write_bytes};

fuzz_target!(|data: &[u8]| {
    let Ok((x, elem)) = read_bytes(data) else { return };
    let n: usize = x.shape.iter().product();
    assert_eq!(n, x.data.len(), "shape {:?} but {} elements", x.shape, x.data.len());
    // The data read are at most what follows the magic string and header.
    assert!(n * elem.size_bytes() <= data.len(), "{n} elements from {} bytes", data.len());
    let bytes = write_bytes(&x, elem).expect("an array that was read can be written");
    let (y, elem2) = read_bytes(&bytes).expect("a written array can be read");
    assert_eq!(elem2, elem);
    assert_eq!(y.shape, x.shape);
    for (k, (a, b)) in y.data.iter().zip(&x.data).enumerate() {
        assert!(
            a.to_bits() == b.to_bits() || (a.is_nan() && b.is_nan()),
            "element {k}: {a} after the round trip, {b} before"
        );
    }
});
