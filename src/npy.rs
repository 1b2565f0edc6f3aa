//! Reading and writing tensors as `.npy` files, so numpy users can check results.
//!
//! Reads `float64` and `float32` arrays of either byte order, in C order or Fortran
//! order (transposed to row-major); any other dtype is refused. A header is checked
//! before the data is touched, so a truncated or corrupt file (or one whose shape
//! promises more elements than the interpreter allows) is an error, never a panic or
//! a huge allocation. Writes little-endian C-order arrays of the tensor's declared
//! element type (`<f8` or `<f4`).

use crate::sema::hir::ElemType;
use crate::tensor::{for_each_index, Dense, MAX_TENSOR_ELEMENTS};
use npyz::{DType, NpyFile, Order, TypeChar, WriterBuilder};
use std::path::Path;

/// Why a `.npy` file could not be read or written (the message is for a person).
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{0}")]
pub struct NpyError(pub String);

fn err(msg: impl Into<String>) -> NpyError {
    NpyError(msg.into())
}

/// Reads a `.npy` file: the array (row-major) and the element type stored in it.
pub fn read_file(path: &Path) -> Result<(Dense, ElemType), NpyError> {
    let bytes = std::fs::read(path).map_err(|e| err(format!("cannot read `{}`: {e}", path.display())))?;
    read_bytes(&bytes).map_err(|e| err(format!("`{}`: {e}", path.display())))
}

/// Reads a `.npy` file's contents; see [`read_file`].
pub fn read_bytes(bytes: &[u8]) -> Result<(Dense, ElemType), NpyError> {
    let (header_end, header_text) = split_header(bytes)?;
    // npyz multiplies the shape without overflow checks (and reads any Python
    // literal, where a key may be spelled twice or with escapes): only a header of
    // the plain form numpy writes is handed to it, with a shape checked here first.
    let header = parse_header(header_text)?;
    check_shape(&header.shape)?;
    if let Some(elem) = complex_descr(&header.descr) {
        return read_complex(&bytes[header_end..], &header, elem);
    }
    if let Some(elem) = half_descr(&header.descr) {
        return read_half(&bytes[header_end..], &header, elem);
    }
    let npy = NpyFile::new(bytes).map_err(|e| err(format!("not a valid .npy file: {e}")))?;
    let elem = match npy.dtype() {
        DType::Plain(ts) if ts.type_char() == TypeChar::Float && ts.size_field() == 8 => ElemType::F64,
        DType::Plain(ts) if ts.type_char() == TypeChar::Float && ts.size_field() == 4 => ElemType::F32,
        other => {
            return Err(err(format!(
                "unsupported dtype {}: tcc reads float64 (`<f8`), float32 (`<f4`), float16 (`<f2`), bfloat16 as its bits (`<u2`), complex128 (`<c16`) and complex64 (`<c8`) arrays",
                other.descr()
            )))
        }
    };
    if npy.shape() != header.shape.as_slice() {
        return Err(err(format!("the array's shape {:?} was read as {:?}", header.shape, npy.shape())));
    }
    let shape: Vec<usize> = npy.shape().iter().map(|&d| d as usize).collect();
    let n: usize = shape.iter().product();
    check_length(&shape, n * elem.size_bytes(), bytes.len() - header_end)?;
    let order = npy.order();
    let stored: Vec<f64> = match elem {
        ElemType::F64 | ElemType::C128 => npy.into_vec::<f64>(),
        ElemType::F32 | ElemType::C64 | ElemType::BF16 | ElemType::F16 => {
            npy.into_vec::<f32>().map(|v| v.into_iter().map(f64::from).collect())
        }
    }
    .map_err(|e| err(format!("cannot read the data: {e}")))?;
    if stored.len() != n {
        return Err(err(format!("expected {n} elements, read {}", stored.len())));
    }
    let data = c_order(stored, &shape, matches!(order, Order::Fortran), 1);
    Ok((Dense { shape, data }, elem))
}

/// The complex type of a `<c16`/`<c8` (or big-endian `>`) descriptor.
fn complex_descr(descr: &str) -> Option<ElemType> {
    match descr {
        "<c16" | ">c16" => Some(ElemType::C128),
        "<c8" | ">c8" => Some(ElemType::C64),
        _ => None,
    }
}

/// The 16-bit type of a descriptor: `<f2` is IEEE half (numpy `float16`); `<u2`
/// holds bfloat16 bit patterns, the convention tcc uses for bf16 since numpy has
/// no bfloat16 dtype (`x.view(np.uint16)`, and back with `.view(ml_dtypes.bfloat16)`).
fn half_descr(descr: &str) -> Option<ElemType> {
    match descr {
        "<f2" | ">f2" => Some(ElemType::F16),
        "<u2" | ">u2" => Some(ElemType::BF16),
        _ => None,
    }
}

/// A 16-bit array (`<f2` or `<u2`, see [`half_descr`]) widened to exact values.
fn read_half(data: &[u8], header: &Header, elem: ElemType) -> Result<(Dense, ElemType), NpyError> {
    let shape: Vec<usize> = header.shape.iter().map(|&d| d as usize).collect();
    let n: usize = shape.iter().product();
    let needed = n * 2;
    check_length(&shape, needed, data.len())?;
    let big = header.descr.starts_with('>');
    let stored: Vec<f64> = data[..needed]
        .chunks_exact(2)
        .map(|b| {
            let bits = if big { u16::from_be_bytes([b[0], b[1]]) } else { u16::from_le_bytes([b[0], b[1]]) };
            f64::from(if elem == ElemType::BF16 {
                crate::half::bf16_to_f32(bits)
            } else {
                crate::half::f16_to_f32(bits)
            })
        })
        .collect();
    let data = c_order(stored, &shape, header.fortran, 1);
    Ok((Dense { shape, data }, elem))
}

/// A complex array (`complex128`/`complex64`) as a real one with a last dimension
/// of 2, (re, im) interleaved: how every interface of tcc carries complex data.
fn read_complex(data: &[u8], header: &Header, elem: ElemType) -> Result<(Dense, ElemType), NpyError> {
    let shape: Vec<usize> = header.shape.iter().map(|&d| d as usize).collect();
    let n: usize = shape.iter().product();
    let part = elem.real_part().size_bytes();
    let needed = n * 2 * part;
    check_length(&shape, needed, data.len())?;
    let big = header.descr.starts_with('>');
    let stored: Vec<f64> = data[..needed]
        .chunks_exact(part)
        .map(|b| match (part, big) {
            (8, false) => f64::from_le_bytes(b.try_into().expect("8 bytes")),
            (8, true) => f64::from_be_bytes(b.try_into().expect("8 bytes")),
            (_, false) => f64::from(f32::from_le_bytes(b.try_into().expect("4 bytes"))),
            (_, true) => f64::from(f32::from_be_bytes(b.try_into().expect("4 bytes"))),
        })
        .collect();
    let data = c_order(stored, &shape, header.fortran, 2);
    let mut shape = shape;
    shape.push(2);
    Ok((Dense { shape, data }, elem))
}

/// E0706's "truncated" when fewer than `needed` data bytes follow the header.
fn check_length(shape: &[usize], needed: usize, available: usize) -> Result<(), NpyError> {
    if available < needed {
        return Err(err(format!(
            "truncated: its shape {shape:?} needs {needed} bytes of data but only {available} follow the header"
        )));
    }
    Ok(())
}

/// The values of an array of `shape` in row-major order, from `stored` in file
/// order (`fortran`: element (i0, i1, …) at i0 + s0·(i1 + s1·(…))); each element
/// is `group` consecutive values (2 for the (re, im) of a complex one).
fn c_order(stored: Vec<f64>, shape: &[usize], fortran: bool, group: usize) -> Vec<f64> {
    if !fortran {
        return stored;
    }
    let mut fstrides = vec![1usize; shape.len()];
    for d in 1..shape.len() {
        fstrides[d] = fstrides[d - 1] * shape[d - 1];
    }
    let mut out = Vec::with_capacity(stored.len());
    for_each_index(shape, |idx| {
        let k = idx.iter().zip(&fstrides).map(|(i, s)| i * s).sum::<usize>();
        out.extend_from_slice(&stored[group * k..group * (k + 1)]);
    });
    out
}

/// The shape of the array in a `.npy` file, from its header (the data is not read).
pub fn read_shape(path: &Path) -> Result<Vec<usize>, NpyError> {
    let bytes = std::fs::read(path).map_err(|e| err(format!("cannot read `{}`: {e}", path.display())))?;
    let shape = split_header(&bytes).and_then(|(_, h)| parse_header(h)).and_then(|h| {
        check_shape(&h.shape)?;
        Ok(h.shape.iter().map(|&d| d as usize).collect())
    });
    shape.map_err(|e| err(format!("`{}`: {e}", path.display())))
}

/// A `.npy` file opened for reading boxes of its array without reading the
/// rest: what each rank of a distributed run reads its own tiles with
/// (`tcc run --tiled --backend mpi --input`), so no rank holds a whole tensor.
#[derive(Debug)]
pub struct BoxReader {
    file: std::fs::File,
    path: String,
    data_offset: u64,
    pub shape: Vec<usize>,
    pub elem: ElemType,
    big_endian: bool,
    fortran: bool,
    /// The component read of each complex element: 0 its real part, 1 its
    /// imaginary part (a complex tensor runs tiled as two real ones).
    part: usize,
}

impl BoxReader {
    /// Opens `path` and checks its header as [`read_file`] does; the data is
    /// checked to be all there (the file's length), not read.
    pub fn open(path: &Path) -> Result<BoxReader, NpyError> {
        use std::io::Read;
        let name = path.display().to_string();
        let at = |e: NpyError| err(format!("`{name}`: {e}"));
        let mut file = std::fs::File::open(path).map_err(|e| err(format!("cannot read `{name}`: {e}")))?;
        let mut head = vec![0u8; 12];
        let n = file.read(&mut head).map_err(|e| err(format!("cannot read `{name}`: {e}")))?;
        head.truncate(n);
        let len = match head.get(6) {
            Some(1) if n >= 10 => 10 + u16::from_le_bytes([head[8], head[9]]) as usize,
            Some(2 | 3) if n >= 12 => 12 + u32::from_le_bytes([head[8], head[9], head[10], head[11]]) as usize,
            _ => return Err(at(err("not a .npy file, or a truncated header"))),
        };
        if len > 1 << 20 {
            return Err(at(err("the .npy header is longer than 1 MiB")));
        }
        let mut bytes = vec![0u8; len];
        std::io::Seek::seek(&mut file, std::io::SeekFrom::Start(0)).map_err(|e| at(err(e.to_string())))?;
        file.read_exact(&mut bytes).map_err(|_| at(err("truncated .npy header")))?;
        let (end, text) = split_header(&bytes).map_err(at)?;
        let header = parse_header(text).map_err(at)?;
        check_shape(&header.shape).map_err(at)?;
        let big_endian = header.descr.starts_with('>');
        let elem = match header.descr.as_str() {
            "<f8" | "=f8" | ">f8" => ElemType::F64,
            "<f4" | "=f4" | ">f4" => ElemType::F32,
            d => complex_descr(d).or_else(|| half_descr(d)).ok_or_else(|| {
                at(err(format!(
                    "unsupported dtype {d}: tcc reads float64, float32, complex128, complex64, float16 and bfloat16 \
                     (`<u2` bits) arrays box by box"
                )))
            })?,
        };
        let shape: Vec<usize> = header.shape.iter().map(|&d| d as usize).collect();
        let needed = shape.iter().product::<usize>() as u64 * elem.size_bytes() as u64;
        let size = file.metadata().map_err(|e| at(err(e.to_string())))?.len();
        if size < end as u64 + needed {
            return Err(at(err(format!(
                "truncated: its shape {shape:?} needs {needed} bytes of data but only {} follow the header",
                size.saturating_sub(end as u64)
            ))));
        }
        Ok(BoxReader {
            file,
            path: name,
            data_offset: end as u64,
            shape,
            elem,
            big_endian,
            fortran: header.fortran,
            part: 0,
        })
    }

    /// Reads component `part` (0 real, 1 imaginary) of each element of a
    /// complex file from now on.
    pub fn select_part(&mut self, part: usize) {
        debug_assert!(part < 2 && (part == 0 || self.elem.is_complex()));
        self.part = part;
    }

    /// Reads the box `start + [0, extent)` into `out` (row-major, last index
    /// fastest; `out.len()` is the box's size), one read per run of elements
    /// contiguous in the file.
    pub fn read_box(&self, start: &[usize], extent: &[usize], out: &mut [f64]) -> Result<(), NpyError> {
        use std::os::unix::fs::FileExt;
        let n = self.shape.len();
        let inside = start.len() == n && extent.len() == n && (0..n).all(|d| start[d] + extent[d] <= self.shape[d]);
        if !inside || out.len() != extent.iter().product::<usize>() {
            return Err(err(format!("internal: box {start:?}+{extent:?} of {:?}", self.shape)));
        }
        if out.is_empty() {
            return Ok(());
        }
        // File strides (elements) and the axis contiguous in the file.
        let mut fstride = vec![1usize; n];
        let contiguous = if self.fortran { 0 } else { n.saturating_sub(1) };
        if self.fortran {
            for d in 1..n {
                fstride[d] = fstride[d - 1] * self.shape[d - 1];
            }
        } else {
            for d in (0..n.saturating_sub(1)).rev() {
                fstride[d] = fstride[d + 1] * self.shape[d + 1];
            }
        }
        // Row-major strides of the box.
        let mut bstride = vec![1usize; n];
        for d in (0..n.saturating_sub(1)).rev() {
            bstride[d] = bstride[d + 1] * extent[d + 1];
        }
        let size = self.elem.size_bytes();
        let run = if n == 0 { 1 } else { extent[contiguous] };
        let mut bytes = vec![0u8; run * size];
        let mut outer: Vec<usize> = extent.to_vec();
        if n > 0 {
            outer[contiguous] = 1;
        }
        let mut result = Ok(());
        crate::tensor::for_each_index(&outer, |l| {
            if result.is_err() {
                return;
            }
            let file_at: usize = (0..n).map(|d| (start[d] + l[d]) * fstride[d]).sum();
            let box_at: usize = (0..n).map(|d| l[d] * bstride[d]).sum();
            let offset = self.data_offset + (file_at * size) as u64;
            if let Err(e) = self.file.read_exact_at(&mut bytes, offset) {
                result = Err(err(format!("cannot read `{}`: {e}", self.path)));
                return;
            }
            let step = if n == 0 { 0 } else { bstride[contiguous] };
            // The bytes of the component read: all of a real element, one half of
            // a complex one.
            let width = if self.elem.is_complex() { size / 2 } else { size };
            for (k, e) in bytes.chunks_exact(size).enumerate() {
                let b = &e[self.part * width..(self.part + 1) * width];
                let v = match (self.elem, self.big_endian) {
                    (ElemType::F64 | ElemType::C128, false) => f64::from_le_bytes(b.try_into().expect("8 bytes")),
                    (ElemType::F64 | ElemType::C128, true) => f64::from_be_bytes(b.try_into().expect("8 bytes")),
                    (ElemType::F32 | ElemType::C64, false) => {
                        f64::from(f32::from_le_bytes(b.try_into().expect("4 bytes")))
                    }
                    (ElemType::F32 | ElemType::C64, true) => {
                        f64::from(f32::from_be_bytes(b.try_into().expect("4 bytes")))
                    }
                    (ElemType::BF16 | ElemType::F16, big) => {
                        let bits =
                            if big { u16::from_be_bytes([b[0], b[1]]) } else { u16::from_le_bytes([b[0], b[1]]) };
                        f64::from(if self.elem == ElemType::BF16 {
                            crate::half::bf16_to_f32(bits)
                        } else {
                            crate::half::f16_to_f32(bits)
                        })
                    }
                };
                out[box_at + k * step] = v;
            }
        });
        result
    }
}

/// Checks the magic string and header length; returns the offset where the data
/// starts and the header text.
fn split_header(bytes: &[u8]) -> Result<(usize, &str), NpyError> {
    if bytes.len() < 10 || &bytes[..6] != b"\x93NUMPY" {
        return Err(err("not a .npy file (no `\\x93NUMPY` magic string at the start)"));
    }
    let (len, start) = match bytes[6] {
        1 => (u16::from_le_bytes([bytes[8], bytes[9]]) as usize, 10usize),
        2 | 3 if bytes.len() >= 12 => (u32::from_le_bytes([bytes[8], bytes[9], bytes[10], bytes[11]]) as usize, 12),
        2 | 3 => return Err(err("truncated .npy header")),
        v => return Err(err(format!("unsupported .npy format version {v}"))),
    };
    let end = start.checked_add(len).filter(|&e| e <= bytes.len()).ok_or_else(|| err("truncated .npy header"))?;
    let text = std::str::from_utf8(&bytes[start..end]).map_err(|_| err("the .npy header is not text"))?;
    Ok((end, text))
}

/// The keys of a `.npy` header, as numpy writes them.
struct Header {
    descr: String,
    fortran: bool,
    shape: Vec<u64>,
}

/// Reads a header of the form numpy writes, `{'descr': '<f8', 'fortran_order':
/// False, 'shape': (2, 3), }`: a dict of the three keys, each once, with a string
/// (no escapes), `True`/`False` and a tuple or list of decimal integers; any other
/// Python literal is refused (npyz would read it, and its shape unchecked).
fn parse_header(text: &str) -> Result<Header, NpyError> {
    // (The header is not quoted: it may hold anything, terminal escapes included.)
    let unusual = |why: &str| {
        err(format!(
            "unsupported .npy header ({why}); tcc reads headers as numpy writes them, like \
             {{'descr': '<f8', 'fortran_order': False, 'shape': (2, 3), }}"
        ))
    };
    let mut p = text.trim_end_matches(['\n', ' ']).trim_start();
    p = p.strip_prefix('{').ok_or_else(|| unusual("not a dict"))?;
    let (mut descr, mut fortran, mut shape) = (None, None, None);
    loop {
        p = p.trim_start();
        if let Some(rest) = p.strip_prefix('}') {
            if !rest.trim().is_empty() {
                return Err(unusual("text after the dict"));
            }
            break;
        }
        let (key, rest) = quoted(p).ok_or_else(|| unusual("a key is not a plain string"))?;
        p = rest.trim_start().strip_prefix(':').ok_or_else(|| unusual("no `:` after a key"))?.trim_start();
        match key {
            "descr" if descr.is_none() => {
                let (v, rest) = quoted(p).ok_or_else(|| unusual("`descr` is not a plain string"))?;
                descr = Some(v);
                p = rest;
            }
            "fortran_order" if fortran.is_none() => {
                let v = ["True", "False"].into_iter().find(|b| p.starts_with(b));
                let v = v.ok_or_else(|| unusual("`fortran_order` is not True or False"))?;
                fortran = Some(v);
                p = &p[v.len()..];
            }
            "shape" if shape.is_none() => {
                let close = match p.as_bytes().first() {
                    Some(b'(') => ')',
                    Some(b'[') => ']',
                    _ => return Err(unusual("`shape` is not a tuple")),
                };
                let end = p.find(close).ok_or_else(|| unusual("`shape` is not closed"))?;
                // `()`, `(3,)`, `(2, 3)`, `(2, 3,)`: integers, one trailing comma
                let inner = p[1..end].trim();
                let inner = inner.strip_suffix(',').unwrap_or(inner);
                let dims: Option<Vec<u64>> = match inner.trim() {
                    "" if p[1..end].trim().is_empty() => Some(Vec::new()),
                    _ => inner
                        .split(',')
                        .map(str::trim)
                        .map(|d| d.bytes().all(|b| b.is_ascii_digit()).then(|| d.parse().ok()).flatten())
                        .collect(),
                };
                let dims = dims.ok_or_else(|| unusual("`shape` is not a tuple of integers"))?;
                shape = Some(dims);
                p = &p[end + 1..];
            }
            _ => return Err(unusual("a key other than descr, fortran_order and shape, or one given twice")),
        }
        p = p.trim_start();
        match p.as_bytes().first() {
            Some(b',') => p = &p[1..],
            Some(b'}') => {}
            _ => return Err(unusual("no `,` between entries")),
        }
    }
    match (descr, fortran, shape) {
        (Some(descr), Some(fortran), Some(shape)) => {
            Ok(Header { descr: descr.to_string(), fortran: fortran == "True", shape })
        }
        _ => Err(unusual("descr, fortran_order or shape is missing")),
    }
}

/// A string in single or double quotes without backslashes at the start of `p`,
/// and the text after it.
fn quoted(p: &str) -> Option<(&str, &str)> {
    let q = p.chars().next().filter(|&c| c == '\'' || c == '"')?;
    let end = p[1..].find(q)? + 1;
    let s = &p[1..end];
    (!s.contains('\\')).then_some((s, &p[end + 1..]))
}

/// The shape has at most [`MAX_TENSOR_ELEMENTS`] elements, counting only its nonzero
/// dimensions (npyz multiplies them, unchecked, into its strides even when another
/// dimension is 0).
fn check_shape(shape: &[u64]) -> Result<(), NpyError> {
    let n = shape.iter().filter(|&&d| d != 0).try_fold(1u64, |acc, &d| acc.checked_mul(d));
    if matches!(n, Some(n) if n <= MAX_TENSOR_ELEMENTS as u64) {
        Ok(())
    } else {
        Err(err(format!("the array's shape {shape:?} has more elements than the limit of 2^31 for a dense tensor")))
    }
}

/// The bytes of a `.npy` file holding `x` as `elem` (little-endian, C order).
pub fn write_bytes(x: &Dense, elem: ElemType) -> Result<Vec<u8>, NpyError> {
    let shape: Vec<u64> = x.shape.iter().map(|&d| d as u64).collect();
    let mut buf = Vec::new();
    let io = |e: std::io::Error| err(format!("cannot encode the array: {e}"));
    match elem {
        ElemType::C128 | ElemType::C64 => {
            // `x` holds (re, im) pairs in a last dimension of 2.
            let Some((&2, shape)) = x.shape.split_last() else {
                return Err(err(format!(
                    "internal: a complex array of shape {:?} has no last dimension of 2",
                    x.shape
                )));
            };
            buf = header_bytes(shape, elem);
            if elem == ElemType::C128 {
                buf.extend(x.data.iter().flat_map(|v| v.to_le_bytes()));
            } else {
                buf.extend(x.data.iter().flat_map(|&v| (v as f32).to_le_bytes()));
            }
        }
        ElemType::F64 => {
            let mut w = npyz::WriteOptions::<f64>::new()
                .default_dtype()
                .shape(&shape)
                .writer(&mut buf)
                .begin_nd()
                .map_err(io)?;
            w.extend(x.data.iter().copied()).map_err(io)?;
            w.finish().map_err(io)?;
        }
        ElemType::BF16 | ElemType::F16 => {
            buf = header_bytes(&x.shape, elem);
            buf.extend(x.data.iter().flat_map(|&v| half_bits(elem, v).to_le_bytes()));
        }
        ElemType::F32 => {
            let mut w = npyz::WriteOptions::<f32>::new()
                .default_dtype()
                .shape(&shape)
                .writer(&mut buf)
                .begin_nd()
                .map_err(io)?;
            w.extend(x.data.iter().map(|&v| v as f32)).map_err(io)?;
            w.finish().map_err(io)?;
        }
    }
    Ok(buf)
}

/// The 16-bit pattern of `v` (rounded to f32, then to `elem`).
fn half_bits(elem: ElemType, v: f64) -> u16 {
    if elem == ElemType::BF16 {
        crate::half::f32_to_bf16(v as f32)
    } else {
        crate::half::f32_to_f16(v as f32)
    }
}

/// Writes `x` to `path` as `elem` (`f32` values are rounded).
pub fn write_file(path: &Path, x: &Dense, elem: ElemType) -> Result<(), NpyError> {
    let bytes = write_bytes(x, elem)?;
    std::fs::write(path, bytes).map_err(|e| err(format!("cannot write `{}`: {e}", path.display())))
}

/// A `.npy` file written box by box: every rank of a distributed run writes the
/// tiles it owns into one file (`tcc run --tiled --backend mpi --output-dir`),
/// so no rank makes the tensor whole. Rank 0 [`BoxWriter::create`]s it (header
/// and full length), the others [`BoxWriter::open`] it after; every rank knows
/// where the data starts from the shape alone ([`header_bytes`]).
#[derive(Debug)]
pub struct BoxWriter {
    file: std::fs::File,
    path: String,
    data_offset: u64,
    shape: Vec<usize>,
    elem: ElemType,
    /// The component written of each complex element (0 real, 1 imaginary).
    part: usize,
}

/// The `.npy` header (format 1.0, C order, little-endian) of an array of
/// `shape` and `elem`, padded to a multiple of 64 bytes as numpy writes it.
pub fn header_bytes(shape: &[usize], elem: ElemType) -> Vec<u8> {
    let dims: Vec<String> = shape.iter().map(|d| d.to_string()).collect();
    let shape = match dims.len() {
        1 => format!("({},)", dims[0]),
        _ => format!("({})", dims.join(", ")),
    };
    let descr = match elem {
        ElemType::F64 => "<f8",
        ElemType::F32 => "<f4",
        ElemType::C128 => "<c16",
        ElemType::C64 => "<c8",
        ElemType::F16 => "<f2",
        ElemType::BF16 => "<u2",
    };
    let mut dict = format!("{{'descr': '{descr}', 'fortran_order': False, 'shape': {shape}, }}");
    let unpadded = 10 + dict.len() + 1;
    dict.push_str(&" ".repeat(unpadded.next_multiple_of(64) - unpadded));
    dict.push('\n');
    let mut out = b"\x93NUMPY\x01\x00".to_vec();
    out.extend_from_slice(&(dict.len() as u16).to_le_bytes());
    out.extend_from_slice(dict.as_bytes());
    out
}

impl BoxWriter {
    /// Creates (or truncates) `path` with the header and room for every element
    /// (zeros until written).
    pub fn create(path: &Path, shape: &[usize], elem: ElemType) -> Result<BoxWriter, NpyError> {
        use std::io::Write;
        let name = path.display().to_string();
        let io = |e: std::io::Error| err(format!("cannot write `{name}`: {e}"));
        let head = header_bytes(shape, elem);
        let mut file =
            std::fs::OpenOptions::new().read(true).write(true).create(true).truncate(true).open(path).map_err(io)?;
        file.write_all(&head).map_err(io)?;
        let bytes = (shape.iter().product::<usize>() * elem.size_bytes()) as u64;
        file.set_len(head.len() as u64 + bytes).map_err(io)?;
        Ok(BoxWriter { file, path: name, data_offset: head.len() as u64, shape: shape.to_vec(), elem, part: 0 })
    }

    /// Opens a file [`BoxWriter::create`] made (on any rank) for writing boxes;
    /// of a complex file, component `part` (0 real, 1 imaginary) of each element.
    pub fn open(path: &Path, shape: &[usize], elem: ElemType, part: usize) -> Result<BoxWriter, NpyError> {
        let name = path.display().to_string();
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(path)
            .map_err(|e| err(format!("cannot write `{name}`: {e}")))?;
        let data_offset = header_bytes(shape, elem).len() as u64;
        Ok(BoxWriter { file, path: name, data_offset, shape: shape.to_vec(), elem, part })
    }

    /// Writes `values` at row-major element `at` onwards (a run contiguous in
    /// the file; `f32` and 16-bit files get the values rounded). Of a complex
    /// file it writes the writer's component of each element and keeps the other
    /// (read, patched, written back): the two parts must not be written at once.
    pub fn write_run(&self, at: usize, values: &[f64]) -> Result<(), NpyError> {
        use std::os::unix::fs::FileExt;
        if at + values.len() > self.shape.iter().product::<usize>() {
            return Err(err(format!("internal: run {at}+{} beyond {:?}", values.len(), self.shape)));
        }
        let size = self.elem.size_bytes();
        let offset = self.data_offset + (at * size) as u64;
        let io = |e: std::io::Error| err(format!("cannot write `{}`: {e}", self.path));
        let bytes: Vec<u8> = match self.elem {
            ElemType::F64 => values.iter().flat_map(|v| v.to_le_bytes()).collect(),
            ElemType::F32 => values.iter().flat_map(|&v| (v as f32).to_le_bytes()).collect(),
            ElemType::BF16 | ElemType::F16 => {
                values.iter().flat_map(|&v| half_bits(self.elem, v).to_le_bytes()).collect()
            }
            ElemType::C128 | ElemType::C64 => {
                let mut bytes = vec![0u8; values.len() * size];
                self.file.read_exact_at(&mut bytes, offset).map_err(io)?;
                let width = size / 2;
                for (e, &v) in bytes.chunks_exact_mut(size).zip(values) {
                    let part = &mut e[self.part * width..(self.part + 1) * width];
                    if width == 8 {
                        part.copy_from_slice(&v.to_le_bytes());
                    } else {
                        part.copy_from_slice(&(v as f32).to_le_bytes());
                    }
                }
                bytes
            }
        };
        self.file.write_all_at(&bytes, offset).map_err(io)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Dense {
        Dense::from_vec(vec![2, 3], vec![1.0, -2.5, 3.25, 1e-300, 0.1, -0.0])
    }

    #[test]
    fn boxes_written_by_two_writers_read_back_whole() {
        let dir = std::env::temp_dir().join(format!("tcc-npy-boxes-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        for (shape, elem) in [(vec![3usize, 4, 5], ElemType::F64), (vec![7], ElemType::F32), (vec![], ElemType::F64)] {
            let path = dir.join("x.npy");
            let n: usize = shape.iter().product();
            let want: Vec<f64> = (0..n).map(|k| k as f64 * 0.5 - 3.0).collect();
            let first = BoxWriter::create(&path, &shape, elem).unwrap();
            let second = BoxWriter::open(&path, &shape, elem, 0).unwrap();
            // Odd runs from one writer, even from the other, out of order.
            let run = shape.last().copied().unwrap_or(1);
            for (r, at) in (0..n).step_by(run).enumerate().rev() {
                let w = if r % 2 == 0 { &first } else { &second };
                w.write_run(at, &want[at..at + run]).unwrap();
            }
            assert!(first.write_run(n, &[1.0]).is_err());
            let (got, e) = read_file(&path).unwrap();
            assert_eq!((got.shape, e), (shape.clone(), elem));
            assert_eq!(got.data, want, "{shape:?}");
            // numpy pads the header to 64 bytes; tcc's writer must agree with its reader.
            assert_eq!(header_bytes(&shape, elem).len() % 64, 0);
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn round_trip_f64() {
        let x = sample();
        let bytes = write_bytes(&x, ElemType::F64).unwrap();
        assert!(String::from_utf8_lossy(&bytes[..80]).contains("'descr': '<f8'"));
        let (y, elem) = read_bytes(&bytes).unwrap();
        assert_eq!(elem, ElemType::F64);
        assert_eq!(y.shape, x.shape);
        assert_eq!(
            y.data.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
            x.data.iter().map(|v| v.to_bits()).collect::<Vec<_>>()
        );
    }

    #[test]
    fn round_trip_f32() {
        let x = sample();
        let bytes = write_bytes(&x, ElemType::F32).unwrap();
        assert!(String::from_utf8_lossy(&bytes[..80]).contains("'descr': '<f4'"));
        let (y, elem) = read_bytes(&bytes).unwrap();
        assert_eq!(elem, ElemType::F32);
        assert_eq!(y.shape, x.shape);
        let expect: Vec<f64> = x.data.iter().map(|&v| v as f32 as f64).collect();
        assert_eq!(y.data, expect);
    }

    #[test]
    fn round_trip_scalar_and_file() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("s.npy");
        write_file(&p, &Dense::scalar(4.5), ElemType::F64).unwrap();
        let (y, _) = read_file(&p).unwrap();
        assert_eq!(y, Dense::scalar(4.5));
        let e = read_file(&dir.path().join("missing.npy")).unwrap_err();
        assert!(e.0.starts_with("cannot read `"), "{e}");
    }

    /// A hand-made v1 `.npy` file.
    fn npy(descr: &str, fortran: bool, shape: &str, data: &[u8]) -> Vec<u8> {
        let mut h = format!(
            "{{'descr': '{descr}', 'fortran_order': {}, 'shape': {shape}, }}",
            if fortran { "True" } else { "False" }
        );
        while (10 + h.len() + 1) % 64 != 0 {
            h.push(' ');
        }
        h.push('\n');
        let mut out = b"\x93NUMPY\x01\x00".to_vec();
        out.extend((h.len() as u16).to_le_bytes());
        out.extend(h.as_bytes());
        out.extend(data);
        out
    }

    #[test]
    fn fortran_order_is_transposed() {
        // [[1, 2, 3], [4, 5, 6]] stored column by column.
        let data: Vec<u8> = [1.0f64, 4.0, 2.0, 5.0, 3.0, 6.0].iter().flat_map(|v| v.to_le_bytes()).collect();
        let (y, _) = read_bytes(&npy("<f8", true, "(2, 3)", &data)).unwrap();
        assert_eq!(y, Dense::from_vec(vec![2, 3], vec![1., 2., 3., 4., 5., 6.]));
    }

    /// Boxes read from C-order, Fortran-order, big-endian and f32 files equal the
    /// same boxes of the whole array; a truncated file is refused at open.
    #[test]
    fn boxes_are_read_without_the_rest_in_every_layout() {
        let shape = [3usize, 4, 5];
        let whole: Vec<f64> = (0..60).map(|x| x as f64 * 0.5 - 7.0).collect();
        let at = |i: usize, j: usize, k: usize| whole[(i * 4 + j) * 5 + k];
        let mut fortran = Vec::new();
        for k in 0..5 {
            for j in 0..4 {
                for i in 0..3 {
                    fortran.push(at(i, j, k));
                }
            }
        }
        let dir = std::env::temp_dir().join(format!("tcc-npy-box-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let files = [
            ("c.npy", npy("<f8", false, "(3, 4, 5)", &whole.iter().flat_map(|v| v.to_le_bytes()).collect::<Vec<_>>())),
            ("f.npy", npy("<f8", true, "(3, 4, 5)", &fortran.iter().flat_map(|v| v.to_le_bytes()).collect::<Vec<_>>())),
            ("be.npy", npy(">f8", false, "(3, 4, 5)", &whole.iter().flat_map(|v| v.to_be_bytes()).collect::<Vec<_>>())),
            (
                "f32.npy",
                npy(
                    "<f4",
                    false,
                    "(3, 4, 5)",
                    &whole.iter().flat_map(|v| (*v as f32).to_le_bytes()).collect::<Vec<_>>(),
                ),
            ),
        ];
        for (name, bytes) in &files {
            let path = dir.join(name);
            std::fs::write(&path, bytes).unwrap();
            let r = BoxReader::open(&path).unwrap();
            assert_eq!(r.shape, shape);
            for (start, ext) in [([0, 0, 0], [3, 4, 5]), ([1, 2, 3], [2, 2, 2]), ([2, 0, 4], [1, 4, 1])] {
                let mut out = vec![0.0; ext.iter().product()];
                r.read_box(&start, &ext, &mut out).unwrap();
                let mut want = Vec::new();
                for i in 0..ext[0] {
                    for j in 0..ext[1] {
                        for k in 0..ext[2] {
                            want.push(at(start[0] + i, start[1] + j, start[2] + k));
                        }
                    }
                }
                assert_eq!(out, want, "{name} {start:?}");
            }
            assert!(r.read_box(&[2, 0, 0], &[2, 1, 1], &mut [0.0; 2]).is_err(), "outside the array");
            std::fs::write(&path, &bytes[..bytes.len() - 3]).unwrap();
            assert!(BoxReader::open(&path).unwrap_err().0.contains("truncated"), "{name}");
        }
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn big_endian_is_read() {
        let data: Vec<u8> = [1.5f32, -2.0].iter().flat_map(|v| v.to_be_bytes()).collect();
        let (y, elem) = read_bytes(&npy(">f4", false, "(2,)", &data)).unwrap();
        assert_eq!((y.data, elem), (vec![1.5, -2.0], ElemType::F32));
    }

    #[test]
    fn wrong_dtype_is_an_error() {
        let data: Vec<u8> = [1i64, 2].iter().flat_map(|v| v.to_le_bytes()).collect();
        let e = read_bytes(&npy("<i8", false, "(2,)", &data)).unwrap_err();
        assert_eq!(
            e.0,
            "unsupported dtype '<i8': tcc reads float64 (`<f8`), float32 (`<f4`), float16 (`<f2`), bfloat16 as its bits (`<u2`), complex128 (`<c16`) and complex64 (`<c8`) arrays"
        );
        // numpy's ml_dtypes.bfloat16 arrays (`<V2`) are ambiguous: refused.
        let e = read_bytes(&npy("<V2", false, "(1,)", &[0; 2])).unwrap_err();
        assert!(e.0.starts_with("unsupported dtype"), "{e}");
    }

    /// 16-bit arrays: `<f2` is f16, `<u2` holds bf16 bits; either byte order and
    /// Fortran order; a truncated file is an error; writing gives the same bytes.
    #[test]
    fn half_arrays_read_and_write() {
        let le: Vec<u8> = [0x3c00u16, 0xc000, 0x0001, 0x7c00].iter().flat_map(|v| v.to_le_bytes()).collect();
        let (y, elem) = read_bytes(&npy("<f2", false, "(4,)", &le)).unwrap();
        assert_eq!(elem, ElemType::F16);
        assert_eq!(y.data, vec![1.0, -2.0, 2f64.powi(-24), f64::INFINITY]);
        let w = write_bytes(&y, ElemType::F16).unwrap();
        assert_eq!(w[w.len() - 8..], le[..]);
        assert_eq!(w.len() % 64, 8); // a padded header, then the data
        let be: Vec<u8> = [0x3f80u16, 0x4049, 0xbf80, 0x0000].iter().flat_map(|v| v.to_be_bytes()).collect();
        let (b, elem) = read_bytes(&npy(">u2", true, "(2, 2)", &be)).unwrap();
        assert_eq!(elem, ElemType::BF16);
        // Fortran order: element (i, j) at i + 2 j.
        assert_eq!(b.data, vec![1.0, -1.0, 3.140625, 0.0]);
        assert!(read_bytes(&npy("<u2", false, "(3,)", &le[..4])).unwrap_err().0.contains("truncated"));
    }

    /// Complex arrays read as (re, im) pairs in a last dimension of 2, from either
    /// byte order and C or Fortran order; written back as `<c16`/`<c8`.
    #[test]
    fn complex_arrays_are_read_interleaved() {
        let vals = [1.0f64, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0]; // 2x2 of (re, im)
        let le: Vec<u8> = vals.iter().flat_map(|v| v.to_le_bytes()).collect();
        let (x, elem) = read_bytes(&npy("<c16", false, "(2, 2)", &le)).unwrap();
        assert_eq!((x.shape.clone(), elem), (vec![2, 2, 2], ElemType::C128));
        assert_eq!(x.data, vals.to_vec());
        // Fortran order: element (0,1) is stored second.
        let (f, _) = read_bytes(&npy("<c16", true, "(2, 2)", &le)).unwrap();
        assert_eq!(f.data, vec![1.0, 2.0, 5.0, 6.0, 3.0, 4.0, 7.0, 8.0]);
        let be: Vec<u8> = vals.iter().flat_map(|&v| (v as f32).to_be_bytes()).collect();
        let (b, elem) = read_bytes(&npy(">c8", false, "(2, 2)", &be)).unwrap();
        assert_eq!((b.data, elem), (vals.to_vec(), ElemType::C64));
        let bytes = write_bytes(&x, ElemType::C128).unwrap();
        assert_eq!(read_bytes(&bytes).unwrap(), (x.clone(), ElemType::C128));
        let e = read_bytes(&npy("<c16", false, "(2, 2)", &le[..40])).unwrap_err();
        assert!(e.0.starts_with("truncated"), "{e}");
    }

    #[test]
    fn truncated_files_are_errors() {
        let bytes = write_bytes(&sample(), ElemType::F64).unwrap();
        for cut in [0, 5, 9, 20, bytes.len() - 48, bytes.len() - 1] {
            let e = read_bytes(&bytes[..cut]).unwrap_err();
            assert!(
                e.0.contains("truncated") || e.0.contains("not a .npy file") || e.0.contains("not a valid"),
                "{cut}: {e}"
            );
        }
        let e = read_bytes(&bytes[..bytes.len() - 1]).unwrap_err();
        assert_eq!(e.0, "truncated: its shape [2, 3] needs 48 bytes of data but only 47 follow the header");
    }

    /// Headers npyz reads whose shape the old check (a search for `'shape'`) did
    /// not see: the product overflowed inside npyz (a panic with overflow checks; a
    /// tensor of no data with a huge shape without); `fuzz/fuzz_targets/npy.rs` fails on them.
    #[test]
    fn unusual_headers_are_errors_and_shapes_are_always_checked() {
        let huge = "(4294967296, 4294967296, 2)";
        let dq = format!(r#"{{"descr": "<f8", "fortran_order": False, "shape": {huge}, }}"#);
        let dup = format!("{{'descr': '<f8', 'fortran_order': False, 'shape': (1,), 'shape': {huge}, }}");
        let esc = format!("{{'descr': '<f8', 'fortran_order': False, 'sh\\x61pe': {huge}, }}");
        for h in [dq.as_str(), &dup, &esc, "{'descr': '<f8', 'fortran_order': False, 'shape': (0x10,), }", "[1]"] {
            let mut h = h.to_string();
            h.push('\n');
            let mut bytes = b"\x93NUMPY\x01\x00".to_vec();
            bytes.extend((h.len() as u16).to_le_bytes());
            bytes.extend(h.as_bytes());
            bytes.extend([0u8; 64]);
            let e = read_bytes(&bytes).unwrap_err();
            assert!(e.0.starts_with("unsupported .npy header") || e.0.contains("limit of 2^31"), "{h}: {e}");
        }
        // A zero dimension: no elements, but npyz's strides multiply the others.
        let e = read_bytes(&npy("<f8", false, "(0, 4294967296, 4294967296, 2)", &[])).unwrap_err();
        assert!(e.0.contains("limit of 2^31"), "{e}");
        // What numpy writes, in its variants, is read.
        for shape in ["()", "(3,)", "(1, 3)", "(1, 3,)", "[1, 3]"] {
            let (y, _) = read_bytes(&npy("<f8", false, shape, &[0; 24])).unwrap_or_else(|e| panic!("{shape}: {e}"));
            assert_eq!(y.data.len(), if shape == "()" { 1 } else { 3 }, "{shape}");
        }
        let (y, _) = read_bytes(&npy("<f8", false, "(0, 5)", &[])).unwrap();
        assert_eq!(y.shape, [0, 5]);
    }

    #[test]
    fn absurd_shapes_are_errors() {
        let e = read_bytes(&npy("<f8", false, "(18446744073709551615, 18446744073709551615)", &[])).unwrap_err();
        assert!(e.0.contains("limit of 2^31"), "{e}");
        let e = read_bytes(&npy("<f8", false, "(1000000, 1000000)", &[])).unwrap_err();
        assert!(e.0.contains("limit of 2^31"), "{e}");
        // A v2 header claiming 4 GiB of header text.
        let mut v2 = b"\x93NUMPY\x02\x00".to_vec();
        v2.extend(u32::MAX.to_le_bytes());
        assert_eq!(read_bytes(&v2).unwrap_err().0, "truncated .npy header");
    }
}
