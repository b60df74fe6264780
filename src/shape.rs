//! Fixed-capacity shapes (no heap), broadcasting rules and checked sizes.

use crate::error::{Error, Result};
use std::fmt;

/// Most dimensions a tensor can have.
pub const MAX_DIMS: usize = 6;
/// Per-tensor element cap, 2^31 - 1: every dimension (and BLAS leading
/// dimension) of a tensor then fits in the i32 that cblas takes.
pub const MAX_ELEMENTS: usize = i32::MAX as usize;

/// A tensor shape, stored inline so table entries and tape records stay `Copy`.
/// Dimensions past `ndim` are always 1 (every constructor fills them so).
#[derive(Clone, Copy)]
pub struct Shape {
    dims: [usize; MAX_DIMS],
    ndim: u8,
    /// The element count, kept (in what was padding) because every op asks
    /// for it; at most `MAX_ELEMENTS`, so it fits.
    numel: u32,
}

// Every op compares shapes, most of them of rank 1 or 2: comparing the
// used dimensions only is a few loads, where the derived comparison of the
// whole array was a call to memcmp. Equal by this rule means equal arrays,
// since the unused dimensions are all 1.
impl PartialEq for Shape {
    #[inline]
    fn eq(&self, o: &Shape) -> bool {
        self.ndim == o.ndim && (0..self.ndim as usize).all(|i| self.dims[i] == o.dims[i])
    }
}

impl Eq for Shape {}

impl std::hash::Hash for Shape {
    fn hash<H: std::hash::Hasher>(&self, h: &mut H) {
        self.dims().hash(h);
    }
}

impl Shape {
    /// Builds a shape, refusing zero dimensions, too many dimensions and
    /// element counts that overflow or pass [`MAX_ELEMENTS`].
    pub fn new(op: &'static str, dims: &[usize]) -> Result<Shape> {
        if dims.is_empty() || dims.len() > MAX_DIMS {
            return Err(Error::BadShape {
                op,
                what: format!("rank {} is outside 1..={MAX_DIMS}", dims.len()),
            });
        }
        let mut n: usize = 1;
        for (axis, &d) in dims.iter().enumerate() {
            if d == 0 {
                return Err(Error::BadShape {
                    op,
                    what: format!(
                        "dimension {axis} of {dims:?} is zero (empty tensors are not supported)"
                    ),
                });
            }
            n = n
                .checked_mul(d)
                .filter(|&n| n <= MAX_ELEMENTS)
                .ok_or_else(|| Error::TooLarge {
                    op,
                    what: format!("shape {dims:?} has more than {MAX_ELEMENTS} elements"),
                })?;
        }
        let mut s = Shape {
            dims: [1; MAX_DIMS],
            ndim: dims.len() as u8,
            numel: n as u32,
        };
        s.dims[..dims.len()].copy_from_slice(dims);
        Ok(s)
    }

    /// A shape known to be valid (used for internally derived shapes).
    pub(crate) fn from_valid(dims: &[usize]) -> Shape {
        debug_assert!(!dims.is_empty() && dims.len() <= MAX_DIMS);
        let n: usize = dims.iter().product();
        // Derived shapes are checked against MAX_ELEMENTS where derived.
        let numel = u32::try_from(n).expect("derived shape has at most MAX_ELEMENTS elements");
        let mut s = Shape {
            dims: [1; MAX_DIMS],
            ndim: dims.len() as u8,
            numel,
        };
        s.dims[..dims.len()].copy_from_slice(dims);
        s
    }

    pub fn scalar() -> Shape {
        Shape::from_valid(&[1])
    }

    pub fn dims(&self) -> &[usize] {
        &self.dims[..self.ndim as usize]
    }

    pub fn ndim(&self) -> usize {
        self.ndim as usize
    }

    #[inline(always)]
    pub fn numel(&self) -> usize {
        self.numel as usize
    }

    /// Size of the last dimension.
    pub fn last(&self) -> usize {
        self.dims[self.ndim as usize - 1]
    }

    /// Product of all dimensions but the last ("rows").
    pub fn rows(&self) -> usize {
        self.numel() / self.last()
    }

    /// Resolves a possibly negative axis.
    pub(crate) fn axis(&self, op: &'static str, axis: i32) -> Result<usize> {
        let n = self.ndim() as i32;
        let a = if axis < 0 { axis + n } else { axis };
        if a < 0 || a >= n {
            return Err(Error::BadShape {
                op,
                what: format!("axis {axis} is out of range for shape {self}"),
            });
        }
        Ok(a as usize)
    }

    /// Numpy-style broadcast of two shapes (right-aligned, size 1 stretches).
    pub(crate) fn broadcast(op: &'static str, a: Shape, b: Shape) -> Result<Shape> {
        if a == b {
            // Already a valid shape (the common case of every scalar op).
            return Ok(a);
        }
        let n = a.ndim().max(b.ndim());
        let mut out = [1usize; MAX_DIMS];
        for i in 0..n {
            let da = if i < a.ndim() {
                a.dims[a.ndim() - 1 - i]
            } else {
                1
            };
            let db = if i < b.ndim() {
                b.dims[b.ndim() - 1 - i]
            } else {
                1
            };
            out[n - 1 - i] = match (da, db) {
                (x, y) if x == y => x,
                (1, y) => y,
                (x, 1) => x,
                _ => {
                    return Err(Error::ShapeMismatch {
                        op,
                        what: "shapes cannot be broadcast together",
                        a,
                        b,
                    });
                }
            };
        }
        // Each operand fits the cap, their broadcast may not.
        Shape::new(op, &out[..n])
    }

    /// Row-major strides of `self` when viewed inside `out` (which `self`
    /// broadcasts to): stretched and missing axes get stride 0.
    pub(crate) fn broadcast_strides(&self, out: &Shape) -> [usize; MAX_DIMS] {
        let mut strides = [0usize; MAX_DIMS];
        let off = out.ndim() - self.ndim();
        let mut s = 1;
        for i in (0..self.ndim()).rev() {
            strides[off + i] = if self.dims[i] == 1 { 0 } else { s };
            s *= self.dims[i];
        }
        strides
    }
}

impl fmt::Display for Shape {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "[")?;
        for (i, d) in self.dims().iter().enumerate() {
            if i > 0 {
                write!(f, ",")?;
            }
            write!(f, "{d}")?;
        }
        write!(f, "]")
    }
}

impl fmt::Debug for Shape {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refuses_zero_overflow_and_rank() {
        assert!(matches!(
            Shape::new("t", &[0, 3]),
            Err(Error::BadShape { .. })
        ));
        assert!(matches!(
            Shape::new("t", &[usize::MAX, 2]),
            Err(Error::TooLarge { .. })
        ));
        assert!(matches!(
            Shape::new("t", &[1 << 16, 1 << 16]),
            Err(Error::TooLarge { .. })
        ));
        assert!(matches!(Shape::new("t", &[]), Err(Error::BadShape { .. })));
        assert!(matches!(
            Shape::new("t", &[1; 7]),
            Err(Error::BadShape { .. })
        ));
        assert_eq!(Shape::new("t", &[8, 32]).unwrap().to_string(), "[8,32]");
    }

    #[test]
    fn broadcasting_rules() {
        let a = Shape::new("t", &[4, 1, 3]).unwrap();
        let b = Shape::new("t", &[5, 1]).unwrap();
        assert_eq!(Shape::broadcast("t", a, b).unwrap().dims(), &[4, 5, 3]);
        let out = Shape::new("t", &[4, 5, 3]).unwrap();
        assert_eq!(&a.broadcast_strides(&out)[..3], &[3, 0, 1]);
        assert_eq!(&b.broadcast_strides(&out)[..3], &[0, 1, 0]);
        let c = Shape::new("t", &[3, 4]).unwrap();
        let d = Shape::new("t", &[4, 3]).unwrap();
        assert!(Shape::broadcast("add", c, d).is_err());
    }
}
