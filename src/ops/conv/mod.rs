//! Convolution and pooling over NCHW images, with PyTorch's conventions
//! (weights `[C_out, C_in / groups, kH, kW]`, output sizes, ceil mode), so
//! weights and shapes carry over unchanged.
//!
//! Convolution runs through the GEMM: each image is unfolded (im2col) into
//! a `[C_in * kH * kW, H_out * W_out]` column buffer saved in the arena,
//! then every group's weights multiply their rows of it. Backward unfolds
//! the image again into the same buffer for the weight gradient, then
//! overwrites it with the columns' gradient and folds that back (col2im).
//! One-dimensional convolution is the two-dimensional one with H = 1.

mod columns;
mod geometry;
mod im2col;
mod pool;
#[cfg(test)]
mod tests;

pub(crate) use geometry::nchw;
pub(crate) use im2col::{
    backward_conv2d, backward_conv2d_relu, forward_conv2d, forward_conv2d_relu,
};
pub(crate) use pool::{
    backward_avg_pool2d, backward_global_avg_pool2d, backward_max_pool2d, forward_avg_pool2d,
    forward_global_avg_pool2d, forward_max_pool2d,
};

use crate::context::{Context, Tensor};
use crate::error::{Error, Result};
use crate::ops::Op;
pub(crate) use crate::ops::{ConvGeom, PoolGeom};
use crate::shape::Shape;

/// Largest stride, padding, dilation, group count or kernel side an op
/// records: the record holds them as `u16` to stay small.
pub(crate) const MAX_CONV_PARAM: usize = u16::MAX as usize;

/// Most taps of a max-pooling window: the window offset of each maximum is
/// saved as an f32, exact up to 2^24.
const MAX_WINDOW: usize = 1 << 24;

/// Options of [`Context::conv2d`]: PyTorch's `nn.Conv2d` arguments (the
/// padding is symmetric; index 0 is the height axis, 1 the width axis).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Conv2dOptions {
    pub stride: [usize; 2],
    pub padding: [usize; 2],
    pub dilation: [usize; 2],
    pub groups: usize,
}

impl Default for Conv2dOptions {
    fn default() -> Self {
        Conv2dOptions {
            stride: [1, 1],
            padding: [0, 0],
            dilation: [1, 1],
            groups: 1,
        }
    }
}

/// Options of [`Context::max_pool2d`] and [`Context::avg_pool2d`]:
/// PyTorch's `MaxPool2d` / `AvgPool2d` arguments (the stride is explicit).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Pool2dOptions {
    pub kernel: [usize; 2],
    pub stride: [usize; 2],
    pub padding: [usize; 2],
    pub ceil_mode: bool,
}

/// `v` as a recorded `u16`, at least `min`.
fn param(op: &'static str, name: &str, v: usize, min: usize) -> Result<u16> {
    if v < min || v > MAX_CONV_PARAM {
        return Err(Error::InvalidArgument {
            op,
            what: format!("{name} is {v}; it must be in {min}..={MAX_CONV_PARAM}"),
        });
    }
    Ok(v as u16)
}

/// PyTorch's output size along one axis: `(len + 2 pad - span) / stride + 1`
/// rounded down, or up with `ceil_mode`, where then the last window must
/// start inside the input or its left padding. None when the (dilated)
/// window `span` does not fit the padded input.
pub(crate) fn out_len(
    len: usize,
    pad: usize,
    span: usize,
    stride: usize,
    ceil: bool,
) -> Option<usize> {
    let padded = len + 2 * pad;
    if span > padded {
        return None;
    }
    let room = padded - span;
    let mut n = if ceil {
        room.div_ceil(stride)
    } else {
        room / stride
    } + 1;
    if ceil && (n - 1) * stride >= len + pad {
        n -= 1;
    }
    Some(n)
}

impl Context {
    /// 2-D convolution (cross-correlation, as PyTorch's `conv2d`).
    /// x: `[N, C_in, H, W]`, weight: `[C_out, C_in / groups, kH, kW]`,
    /// bias: `[C_out]` or None -> `[N, C_out, H_out, W_out]`, with
    /// `H_out = (H + 2 pad - dilation (kH - 1) - 1) / stride + 1`.
    pub fn conv2d(
        &mut self,
        x: Tensor,
        weight: Tensor,
        bias: Option<Tensor>,
        opts: Conv2dOptions,
    ) -> Result<Tensor> {
        self.conv("conv2d", x, weight, bias, opts, 4, false)
    }

    /// [`conv2d`](Self::conv2d) followed by ReLU, in one op: each image's
    /// output is clamped while still in cache, and backward masks the
    /// output gradient image by image instead of filling a whole gradient
    /// for the convolution's output. The values and gradients are those
    /// of `relu(conv2d(..))` bit for bit.
    pub fn conv2d_relu(
        &mut self,
        x: Tensor,
        weight: Tensor,
        bias: Option<Tensor>,
        opts: Conv2dOptions,
    ) -> Result<Tensor> {
        self.conv("conv2d_relu", x, weight, bias, opts, 4, true)
    }

    /// 1-D convolution (PyTorch's `conv1d`). x: `[N, C_in, L]`, weight:
    /// `[C_out, C_in / groups, k]`, bias: `[C_out]` or None ->
    /// `[N, C_out, L_out]`. Runs as [`conv2d`](Self::conv2d) with H = 1.
    /// The arguments are PyTorch's, in its order.
    #[allow(clippy::too_many_arguments)]
    pub fn conv1d(
        &mut self,
        x: Tensor,
        weight: Tensor,
        bias: Option<Tensor>,
        stride: usize,
        padding: usize,
        dilation: usize,
        groups: usize,
    ) -> Result<Tensor> {
        let opts = Conv2dOptions {
            stride: [1, stride],
            padding: [0, padding],
            dilation: [1, dilation],
            groups,
        };
        self.conv("conv1d", x, weight, bias, opts, 3, false)
    }

    #[allow(clippy::too_many_arguments)]
    fn conv(
        &mut self,
        op: &'static str,
        x: Tensor,
        weight: Tensor,
        bias: Option<Tensor>,
        opts: Conv2dOptions,
        rank: usize,
        relu: bool,
    ) -> Result<Tensor> {
        let (ix, iw) = (self.resolve(op, x)?, self.resolve(op, weight)?);
        let ib = bias.map(|b| self.resolve(op, b)).transpose()?;
        let (ex, ew) = (self.entry(ix), self.entry(iw));
        if ex.shape.ndim() != rank || ew.shape.ndim() != rank {
            return Err(Error::ShapeMismatch {
                op,
                what: if rank == 4 {
                    "input must be [N,C,H,W] and weight [C_out,C_in/groups,kH,kW]"
                } else {
                    "input must be [N,C,L] and weight [C_out,C_in/groups,k]"
                },
                a: ex.shape,
                b: ew.shape,
            });
        }
        let geom = ConvGeom {
            stride: [
                param(op, "stride", opts.stride[0], 1)?,
                param(op, "stride", opts.stride[1], 1)?,
            ],
            pad: [
                param(op, "padding", opts.padding[0], 0)?,
                param(op, "padding", opts.padding[1], 0)?,
            ],
            dilation: [
                param(op, "dilation", opts.dilation[0], 1)?,
                param(op, "dilation", opts.dilation[1], 1)?,
            ],
            groups: param(op, "groups", opts.groups, 1)?,
        };
        let [n, c, h, w] = nchw(ex.shape);
        let [c_out, c_per_group, kh, kw] = nchw(ew.shape);
        let groups = opts.groups;
        if c % groups != 0 || c_out % groups != 0 || c_per_group != c / groups {
            return Err(Error::ShapeMismatch {
                op,
                what: "channels and output channels must divide by groups, \
                       and weight's dim 1 must be C_in/groups",
                a: ex.shape,
                b: ew.shape,
            });
        }
        if let Some(ib) = ib {
            let eb = self.entry(ib);
            if eb.shape.ndim() != 1 || eb.shape.numel() != c_out {
                return Err(Error::ShapeMismatch {
                    op,
                    what: "bias must be [C_out] for weight [C_out,...]",
                    a: eb.shape,
                    b: ew.shape,
                });
            }
        }
        let span = |k: usize, d: usize| (k - 1) * d + 1;
        let (ho, wo) = match (
            out_len(
                h,
                opts.padding[0],
                span(kh, opts.dilation[0]),
                opts.stride[0],
                false,
            ),
            out_len(
                w,
                opts.padding[1],
                span(kw, opts.dilation[1]),
                opts.stride[1],
                false,
            ),
        ) {
            (Some(ho), Some(wo)) => (ho, wo),
            _ => {
                return Err(Error::ShapeMismatch {
                    op,
                    what: "the dilated kernel is larger than the padded input",
                    a: ex.shape,
                    b: ew.shape,
                });
            }
        };
        let oshape = if rank == 4 {
            Shape::new(op, &[n, c_out, ho, wo])?
        } else {
            Shape::new(op, &[n, c_out, wo])?
        };
        let macs = [c_out, ho * wo, c_per_group, kh * kw]
            .into_iter()
            .fold(1usize, usize::saturating_mul);
        // The fused ReLU's backward masks each image's output gradient into
        // its task's own room after the columns.
        let masked = if relu { c_out * ho * wo } else { 0 };
        let col_len = im2col::col_len(n, c * kh * kw, ho * wo, masked, ew.shape.numel(), macs)
            .and_then(|len| len.checked_add(im2col::bias_sums_len(n, c_out, ib.is_some())?))
            .ok_or_else(|| Error::TooLarge {
                op,
                what: format!(
                    "column buffer for input {} and weight {}",
                    ex.shape, ew.shape
                ),
            })?;
        let tracks = match ib {
            Some(ib) => self.tracks(&[ix, iw, ib]),
            None => self.tracks(&[ix, iw]),
        };
        let col = self.alloc_scratchable::<f32>(op, col_len)?;
        let out = self.push_output(op, oshape, tracks)?;
        let op = if relu {
            Op::Conv2dRelu {
                x: ix,
                w: iw,
                bias: ib,
                geom,
                col,
            }
        } else {
            Op::Conv2d {
                x: ix,
                w: iw,
                bias: ib,
                geom,
                col,
            }
        };
        Ok(self.run(op, out))
    }

    /// 2-D max pooling (PyTorch's `max_pool2d`, dilation 1): padding counts
    /// as -inf; each window's gradient goes to its first maximum in
    /// row-major order. x: `[N, C, H, W]` -> `[N, C, H_out, W_out]`.
    pub fn max_pool2d(&mut self, x: Tensor, opts: Pool2dOptions) -> Result<Tensor> {
        const OP: &str = "max_pool2d";
        let (ix, geom, oshape) = self.pool_shape(OP, x, opts)?;
        if opts.kernel[0] * opts.kernel[1] > MAX_WINDOW {
            return Err(Error::InvalidArgument {
                op: OP,
                what: format!("kernel {:?} has more than {MAX_WINDOW} taps", opts.kernel),
            });
        }
        let tracks = self.tracks(&[ix]);
        let argmax = self.alloc_scratchable::<f32>(OP, oshape.numel())?;
        let out = self.push_output(OP, oshape, tracks)?;
        Ok(self.run(
            Op::MaxPool2d {
                x: ix,
                geom,
                argmax,
            },
            out,
        ))
    }

    /// 2-D average pooling (PyTorch's `avg_pool2d`): with
    /// `count_include_pad`, a window's divisor counts its padding (not the
    /// part past the padding that ceil mode adds); without, only the input
    /// elements it covers. x: `[N, C, H, W]` -> `[N, C, H_out, W_out]`.
    pub fn avg_pool2d(
        &mut self,
        x: Tensor,
        opts: Pool2dOptions,
        count_include_pad: bool,
    ) -> Result<Tensor> {
        const OP: &str = "avg_pool2d";
        let (ix, geom, oshape) = self.pool_shape(OP, x, opts)?;
        let tracks = self.tracks(&[ix]);
        let out = self.push_output(OP, oshape, tracks)?;
        let op = Op::AvgPool2d {
            x: ix,
            geom,
            count_include_pad,
        };
        Ok(self.run(op, out))
    }

    /// Mean over each image plane: x `[N, C, H, W]` -> `[N, C]`.
    pub fn global_avg_pool2d(&mut self, x: Tensor) -> Result<Tensor> {
        const OP: &str = "global_avg_pool2d";
        let ix = self.resolve(OP, x)?;
        let ex = self.entry(ix);
        if ex.shape.ndim() != 4 {
            return Err(Error::BadShape {
                op: OP,
                what: format!("input must be [N,C,H,W], got {}", ex.shape),
            });
        }
        let [n, c, _, _] = nchw(ex.shape);
        let tracks = self.tracks(&[ix]);
        let out = self.push_output(OP, Shape::new(OP, &[n, c])?, tracks)?;
        Ok(self.run(Op::GlobalAvgPool2d { x: ix }, out))
    }

    /// Validates a pooling op's input and options; its output shape.
    fn pool_shape(
        &mut self,
        op: &'static str,
        x: Tensor,
        opts: Pool2dOptions,
    ) -> Result<(u32, PoolGeom, Shape)> {
        let ix = self.resolve(op, x)?;
        let ex = self.entry(ix);
        if ex.shape.ndim() != 4 {
            return Err(Error::BadShape {
                op,
                what: format!("input must be [N,C,H,W], got {}", ex.shape),
            });
        }
        let geom = PoolGeom {
            kernel: [
                param(op, "kernel", opts.kernel[0], 1)?,
                param(op, "kernel", opts.kernel[1], 1)?,
            ],
            stride: [
                param(op, "stride", opts.stride[0], 1)?,
                param(op, "stride", opts.stride[1], 1)?,
            ],
            pad: [
                param(op, "padding", opts.padding[0], 0)?,
                param(op, "padding", opts.padding[1], 0)?,
            ],
        };
        for a in 0..2 {
            if 2 * opts.padding[a] > opts.kernel[a] {
                return Err(Error::InvalidArgument {
                    op,
                    what: format!(
                        "padding {:?} must be at most half of kernel {:?}",
                        opts.padding, opts.kernel
                    ),
                });
            }
        }
        let [n, c, h, w] = nchw(ex.shape);
        let len = |a: usize, size: usize| {
            out_len(
                size,
                opts.padding[a],
                opts.kernel[a],
                opts.stride[a],
                opts.ceil_mode,
            )
        };
        match (len(0, h), len(1, w)) {
            (Some(ho), Some(wo)) => Ok((ix, geom, Shape::new(op, &[n, c, ho, wo])?)),
            _ => Err(Error::BadShape {
                op,
                what: format!(
                    "kernel {:?} is larger than input {} padded by {:?}",
                    opts.kernel, ex.shape, opts.padding
                ),
            }),
        }
    }
}
