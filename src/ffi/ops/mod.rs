//! Op entry points, one file per op family as in src/ops. Each checks its
//! out-pointer first, runs the op through the safe API and writes the result
//! handle only on success (see `op` in the guard module). Each doc comment
//! ends with the op's complete list of statuses ("Errors:"), beside the ones
//! every function with a context may return (see the header's conventions);
//! a test provokes each and checks nothing else comes back.

// Declared in the header's order (blank lines keep rustfmt from sorting).
mod elementwise;

mod special;

mod reduce;

mod shape;

mod matmul;

mod dropout;

mod embedding;

mod loss;

mod norm;

mod batch_norm;

mod attention;

mod conv;
mod llama;

mod linalg;

mod glm;

mod transforms;

pub use attention::*;
pub use batch_norm::*;
pub use conv::*;
pub use dropout::*;
pub use elementwise::*;
pub use embedding::*;
pub use glm::*;
pub use linalg::*;
pub use llama::*;
pub use loss::*;
pub use matmul::*;
pub use norm::*;
pub use reduce::*;
pub use shape::*;
pub use special::*;
pub use transforms::*;
