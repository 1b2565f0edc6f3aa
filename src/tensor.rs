//! Tensor data: the dense row-major format every part of tcc exchanges values in
//! (the interpreter, the back ends, the distributed executors, `.npy` files), with
//! its shape, stride and position helpers. The tiled, packed and block-sparse
//! formats of a later issue will live beside it.

/// The largest tensor (elements) the interpreter allocates: 2^31.
pub const MAX_TENSOR_ELEMENTS: usize = 1 << 31;

/// A dense tensor of `f64`, row-major (C order: the last index varies fastest).
/// A scalar has an empty shape and one element.
#[derive(Debug, Clone, PartialEq)]
pub struct Dense {
    pub shape: Vec<usize>,
    pub data: Vec<f64>,
}

impl Dense {
    /// A tensor of zeros; `what` names it in the error if it is too large or its
    /// memory cannot be allocated.
    pub fn zeros(what: &str, shape: Vec<usize>) -> Result<Dense, AllocError> {
        let n = checked_len(what, &shape)?;
        let mut data = try_vec(what, n)?;
        data.resize(n, 0.0);
        Ok(Dense { shape, data })
    }

    /// A tensor from its row-major elements. Panics if the length does not match
    /// the shape (a bug in the caller).
    pub fn from_vec(shape: Vec<usize>, data: Vec<f64>) -> Dense {
        assert_eq!(
            shape.iter().product::<usize>(),
            data.len(),
            "Dense::from_vec: shape {shape:?} vs {} elements",
            data.len()
        );
        Dense { shape, data }
    }

    /// A scalar.
    pub fn scalar(x: f64) -> Dense {
        Dense { shape: Vec::new(), data: vec![x] }
    }

    /// The row-major stride of each dimension.
    pub fn strides(&self) -> Vec<usize> {
        strides(&self.shape)
    }

    /// The element at a multi-index (one entry per dimension).
    pub fn get(&self, index: &[usize]) -> f64 {
        self.data[linear(&self.shape, index)]
    }
}

/// A dense row-major tensor borrowed from elsewhere (a caller's array): checks
/// that read values need no copy.
#[derive(Debug, Clone, Copy)]
pub struct DenseRef<'a> {
    pub shape: &'a [usize],
    pub data: &'a [f64],
}

impl DenseRef<'_> {
    pub fn get(&self, index: &[usize]) -> f64 {
        self.data[linear(self.shape, index)]
    }
}

impl<'a> From<&'a Dense> for DenseRef<'a> {
    fn from(x: &'a Dense) -> DenseRef<'a> {
        DenseRef { shape: &x.shape, data: &x.data }
    }
}

/// A tensor of more elements than [`MAX_TENSOR_ELEMENTS`] (the interpreter's
/// [`crate::interp::InterpError::TensorTooLarge`] says the same).
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{what} would have {count} elements (shape {shape:?}), more than the limit of 2^31 for a dense tensor of `tcc run` (interpreter and JIT; tiled storage, `--tiled`, has none)")]
pub struct TooLarge {
    pub what: String,
    pub shape: Vec<usize>,
    pub count: String,
}

/// Memory for a tensor's elements that the system refused (a memory limit,
/// `ulimit -v`, cgroups): reported as an error instead of aborting the process.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("cannot allocate {bytes} bytes for {what} ({count} elements of 8 bytes): out of memory")]
pub struct OutOfMemory {
    pub what: String,
    pub count: usize,
    pub bytes: u128,
}

/// Why a tensor could not be allocated.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum AllocError {
    #[error(transparent)]
    TooLarge(#[from] TooLarge),
    #[error(transparent)]
    OutOfMemory(#[from] OutOfMemory),
}

/// An empty vector with room for `n` elements, allocated fallibly (no abort when
/// the memory is not there).
pub fn try_vec<T>(what: &str, n: usize) -> Result<Vec<T>, OutOfMemory> {
    let mut v = Vec::new();
    v.try_reserve_exact(n).map_err(|_| OutOfMemory {
        what: what.to_string(),
        count: n,
        bytes: n as u128 * std::mem::size_of::<T>().max(1) as u128,
    })?;
    Ok(v)
}

/// The number of elements of `shape`, or [`TooLarge`] beyond [`MAX_TENSOR_ELEMENTS`].
pub fn checked_len(what: &str, shape: &[usize]) -> Result<usize, TooLarge> {
    let n = shape.iter().try_fold(1u128, |acc, &d| acc.checked_mul(d as u128));
    match n {
        Some(n) if n <= MAX_TENSOR_ELEMENTS as u128 => Ok(n as usize),
        _ => Err(TooLarge {
            what: what.to_string(),
            shape: shape.to_vec(),
            count: n.map_or_else(|| "more than 2^128".to_string(), |n| n.to_string()),
        }),
    }
}

/// The row-major stride of each dimension of `shape`.
pub fn strides(shape: &[usize]) -> Vec<usize> {
    let mut s = vec![1usize; shape.len()];
    for d in (0..shape.len().saturating_sub(1)).rev() {
        s[d] = s[d + 1] * shape[d + 1];
    }
    s
}

/// The row-major position of a multi-index in `shape` (panics out of bounds).
pub fn linear(shape: &[usize], index: &[usize]) -> usize {
    assert_eq!(shape.len(), index.len());
    index.iter().zip(shape).fold(0, |acc, (&i, &n)| {
        assert!(i < n, "index {index:?} out of bounds for shape {shape:?}");
        acc * n + i
    })
}

/// Calls `f` on every multi-index of `shape` in row-major order (once for a scalar).
pub fn for_each_index(shape: &[usize], mut f: impl FnMut(&[usize])) {
    if shape.contains(&0) {
        return;
    }
    let mut idx = vec![0usize; shape.len()];
    loop {
        f(&idx);
        let mut d = shape.len();
        loop {
            if d == 0 {
                return;
            }
            d -= 1;
            idx[d] += 1;
            if idx[d] < shape[d] {
                break;
            }
            idx[d] = 0;
        }
    }
}
