//! The tape: one fixed-size, `Copy` record per op. The op's inputs and
//! attributes are inline in its [`Op`]; nothing in a record points at caller
//! memory, and the only buffers a record names are arena buffers the op
//! saved for its backward pass.

use crate::ops::Op;

/// One tape entry: the op and the table id of its output.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Node {
    pub op: Op,
    pub out: u32,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::BinaryFn;

    #[test]
    fn record_is_small_and_inline() {
        // Inline records keep the tape one contiguous, allocation-free array.
        assert!(
            size_of::<Node>() <= 96,
            "Node is {} bytes",
            size_of::<Node>()
        );
        let n = Node {
            op: Op::Binary {
                a: 3,
                b: 4,
                f: BinaryFn::Add,
            },
            out: 5,
        };
        assert_eq!(n.op.inputs().as_slice(), &[3, 4]);
    }
}
