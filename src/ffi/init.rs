//! Parameter initialisers: ag_param_init and its AG_INIT_* kinds.

use super::prelude::*;
use crate::init::Init;

/// ag_param_init kind: every value 0 (a and b must be 0).
pub const AG_INIT_ZEROS: u32 = 0;
/// ag_param_init kind: every value 1 (a and b must be 0).
pub const AG_INIT_ONES: u32 = 1;
/// ag_param_init kind: normal with mean a and standard deviation b >= 0.
pub const AG_INIT_NORMAL: u32 = 2;
/// ag_param_init kind: uniform on [a, b], a <= b.
pub const AG_INIT_UNIFORM: u32 = 3;
/// ag_param_init kind: Xavier/Glorot uniform, U(-l, l) with
/// l = a * sqrt(6 / (fan_in + fan_out)); a is the gain (> 0), b must be 0.
pub const AG_INIT_XAVIER_UNIFORM: u32 = 4;
/// ag_param_init kind: Xavier/Glorot normal, N(0, s^2) with
/// s = a * sqrt(2 / (fan_in + fan_out)); a is the gain (> 0), b must be 0.
pub const AG_INIT_XAVIER_NORMAL: u32 = 5;
/// ag_param_init kind: Kaiming/He uniform, U(-l, l) with
/// l = a * sqrt(3 / fan_in); a is the gain (> 0; sqrt(2) for ReLU), b must be 0.
pub const AG_INIT_KAIMING_UNIFORM: u32 = 6;
/// ag_param_init kind: Kaiming/He normal, N(0, s^2) with s = a / sqrt(fan_in);
/// a is the gain (> 0; sqrt(2) for ReLU), b must be 0.
pub const AG_INIT_KAIMING_NORMAL: u32 = 7;

/// The Init a C caller asked for, after checking the kind and that the
/// arguments the kind does not use are 0 (a non-zero one is a mistake, such
/// as arguments in the wrong order).
fn init_arg(func: &'static str, kind: u32, a: f32, b: f32) -> Result<Init> {
    let unused = |name: &str, v: f32, kind_name: &str| -> Result<()> {
        if v == 0.0 {
            Ok(())
        } else {
            Err(Error::InvalidArgument {
                op: func,
                what: format!("{name} = {v} is unused by {kind_name} and must be 0"),
            })
        }
    };
    let gain_only = |name: &str| unused("b", b, name);
    Ok(match kind {
        AG_INIT_ZEROS | AG_INIT_ONES => {
            let name = if kind == AG_INIT_ZEROS {
                "AG_INIT_ZEROS"
            } else {
                "AG_INIT_ONES"
            };
            unused("a", a, name)?;
            unused("b", b, name)?;
            if kind == AG_INIT_ZEROS {
                Init::Zeros
            } else {
                Init::Ones
            }
        }
        AG_INIT_NORMAL => Init::Normal { mean: a, std: b },
        AG_INIT_UNIFORM => Init::Uniform { low: a, high: b },
        AG_INIT_XAVIER_UNIFORM => {
            gain_only("AG_INIT_XAVIER_UNIFORM")?;
            Init::XavierUniform { gain: a }
        }
        AG_INIT_XAVIER_NORMAL => {
            gain_only("AG_INIT_XAVIER_NORMAL")?;
            Init::XavierNormal { gain: a }
        }
        AG_INIT_KAIMING_UNIFORM => {
            gain_only("AG_INIT_KAIMING_UNIFORM")?;
            Init::KaimingUniform { gain: a }
        }
        AG_INIT_KAIMING_NORMAL => {
            gain_only("AG_INIT_KAIMING_NORMAL")?;
            Init::KaimingNormal { gain: a }
        }
        _ => {
            return Err(Error::InvalidArgument {
                op: func,
                what: format!(
                    "kind {kind} is not an AG_INIT_* value (0..={AG_INIT_KAIMING_NORMAL})"
                ),
            });
        }
    })
}

/// Overwrites parameter `p` with values drawn according to `kind` (an
/// AG_INIT_* value) with arguments `a` and `b` (see each AG_INIT_* for what
/// they mean; arguments a kind does not use must be 0).
///
/// Values are a function of (`seed`, the parameter's index in creation
/// order, the element's index) only: the same seed gives the same bits on
/// every run and thread count, whatever else was initialised before, and
/// different parameters get unrelated streams from one seed. Normal draws
/// use Box-Muller; values are computed in double and rounded to float.
///
/// Fans for Xavier and Kaiming: a weight is [..., in, out] (the layout
/// ag_linear uses: y = x @ w with w [in, out]), so fan_in is the
/// second-to-last dimension and fan_out the last; leading dimensions stack
/// independent matrices. 1-D parameters are refused for these kinds.
///
/// Only the values change (not the gradient or optimizer state).
/// Errors: INVALID_ARGUMENT (unknown kind; p is not a parameter; std < 0; a > b
/// for uniform; gain <= 0; a non-finite argument; a normal whose draws
/// would exceed the float range; an unused argument not 0),
/// SHAPE_MISMATCH (Xavier or Kaiming on a 1-D parameter), STALE_HANDLE,
/// WRONG_CONTEXT, INVALID_HANDLE.
#[unsafe(no_mangle)]
pub extern "C" fn ag_param_init(
    ctx: *mut ag_context,
    p: ag_tensor,
    kind: u32,
    a: f32,
    b: f32,
    seed: u64,
) -> ag_status {
    const F: &str = "ag_param_init";
    guard(F, ctx, |c| {
        let init = init_arg(F, kind, a, b)?;
        c.param_init(p.into(), init, seed)
    })
}
