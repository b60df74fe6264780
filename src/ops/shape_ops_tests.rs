//! Tests of the shape ops: permute (the row path and row tasks against
//! one walk), reshape views, concat and slice, gradient checks.

use crate::ops::gradcheck::{Check, gradcheck};

#[test]
fn permute_values_and_reshape_view() {
    let mut c = crate::Context::new();
    let x = c.tensor(&[2, 3], &[1., 2., 3., 4., 5., 6.]).unwrap();
    let t = c.transpose(x, 0, 1).unwrap();
    let mut v = [0.0; 6];
    c.read(t, &mut v).unwrap();
    assert_eq!(v, [1., 4., 2., 5., 3., 6.]);
    let before = c.memory_stats().arena_used_bytes;
    let r = c.reshape(x, &[3, 2]).unwrap();
    assert_eq!(
        c.memory_stats().arena_used_bytes,
        before,
        "reshape must not copy"
    );
    assert_eq!(c.shape(r).unwrap().dims(), &[3, 2]);
    assert!(
        c.reshape(x, &[4, 2])
            .unwrap_err()
            .to_string()
            .contains("reshape: element counts differ: [2,3] x [4,2]")
    );
    assert!(c.permute(x, &[0, 0]).is_err());
}

/// The row path (last axis kept) moves and adds the same elements as
/// the element walk, forward and backward, for each such permutation.
#[test]
fn row_path_matches_the_element_walk() {
    use crate::shape::Shape;
    let dims = [3, 4, 2, 5];
    let n: usize = dims.iter().product();
    let x: Vec<f32> = (0..n).map(|i| i as f32 * 0.5 - 7.0).collect();
    let g: Vec<f32> = (0..n).map(|i| (i * 7 % 11) as f32 + 0.25).collect();
    for perm in [
        [0u8, 1, 2, 3],
        [1, 0, 2, 3],
        [0, 2, 1, 3],
        [2, 1, 0, 3],
        [1, 2, 0, 3],
    ] {
        let xs = Shape::from_valid(&dims);
        let ys = Shape::from_valid(&perm.map(|p| dims[p as usize]));
        let (mut y, mut want_y) = (vec![0.0; n], vec![0.0; n]);
        super::permute_forward(&mut y, &x, xs, ys, &perm);
        super::permute_walk(xs, ys, &perm, 0..n, |o, s| want_y[o] = x[s]);
        let (mut dx, mut want_dx) = (x.clone(), x.clone());
        super::permute_backward(&mut dx, &g, xs, ys, &perm);
        super::permute_walk(xs, ys, &perm, 0..n, |o, s| want_dx[s] += g[o]);
        assert_eq!((y, dx), (want_y, want_dx), "perm {perm:?}");
    }
}

/// Cut into tasks of output rows (run here in order), each walking
/// from its own first row, a permute moves the same elements as one
/// walk from the start, whether or not it keeps the last axis.
#[test]
fn row_tasks_match_one_walk() {
    use crate::shape::Shape;
    let dims = [3, 5, 2, 7];
    let n: usize = dims.iter().product();
    let x: Vec<f32> = (0..n).map(|i| i as f32 * 0.5 - 7.0).collect();
    for perm in [[0u8, 2, 1, 3], [3, 1, 0, 2], [2, 3, 1, 0], [1, 2, 0, 3]] {
        let xs = Shape::from_valid(&dims);
        let ys = Shape::from_valid(&perm.map(|p| dims[p as usize]));
        let mut want = vec![0.0; n];
        super::permute_forward(&mut want, &x, xs, ys, &perm);
        for tasks in [2, 3, 7] {
            let mut y = vec![f32::NAN; n];
            super::permute_on(None, &mut y, &x, xs, ys, &perm, tasks);
            assert_eq!(y, want, "perm {perm:?}, {tasks} tasks");
        }
    }
}

#[test]
fn gradcheck_shape_ops() {
    gradcheck(Check::new("permute", &[&[2, 3, 4]]), |c, x| {
        c.permute(x[0], &[2, 0, 1])
    });
    gradcheck(Check::new("heads split", &[&[2, 4, 6]]), |c, x| {
        let r = c.reshape(x[0], &[2, 4, 2, 3])?;
        c.permute(r, &[0, 2, 1, 3])
    });
    // A reshape view of a parameter, used alongside the parameter itself.
    gradcheck(Check::new("reshape + original", &[&[2, 3]]), |c, x| {
        let r = c.reshape(x[0], &[3, 2])?;
        let r2 = c.reshape(r, &[2, 3])?;
        let e = c.exp(r2)?;
        c.mul(e, x[0])
    });
}

#[test]
fn concat_values_and_errors() {
    let mut c = crate::Context::new();
    let a = c.tensor(&[2, 2], &[1., 2., 3., 4.]).unwrap();
    let b = c.tensor(&[2, 1], &[5., 6.]).unwrap();
    let d = c.tensor(&[1, 2], &[7., 8.]).unwrap();
    let y = c.concat(&[a, b, a], -1).unwrap();
    assert_eq!(c.shape(y).unwrap().dims(), &[2, 5]);
    let mut v = [0.0; 10];
    c.read(y, &mut v).unwrap();
    assert_eq!(v, [1., 2., 5., 1., 2., 3., 4., 6., 3., 4.]);
    let y0 = c.concat(&[a, d], 0).unwrap();
    let mut v = [0.0; 6];
    c.read(y0, &mut v).unwrap();
    assert_eq!(v, [1., 2., 3., 4., 7., 8.]);
    let before = c.memory_stats().arena_used_bytes;
    let e = c.concat(&[a, b], 0).unwrap_err().to_string();
    assert!(
        e.contains("concat: shapes differ outside the concat axis: [2,2] x [2,1]"),
        "{e}"
    );
    assert!(
        c.concat(&[], 0)
            .unwrap_err()
            .to_string()
            .contains("0 inputs")
    );
    let nine = [a; super::MAX_CONCAT + 1];
    assert!(
        c.concat(&nine, 0)
            .unwrap_err()
            .to_string()
            .contains("1 to 8")
    );
    assert!(c.concat(&[a, b], 2).is_err());
    let r = c.reshape(a, &[4]).unwrap();
    assert!(c.concat(&[a, r], 0).is_err(), "ranks differ");
    assert_eq!(c.memory_stats().arena_used_bytes, before);
    // The cap itself is accepted.
    let eight = [b; super::MAX_CONCAT];
    let y8 = c.concat(&eight, 1).unwrap();
    assert_eq!(c.shape(y8).unwrap().dims(), &[2, 8]);
}

#[test]
fn slice_values_and_bounds() {
    let mut c = crate::Context::new();
    let x = c.tensor(&[2, 3], &[1., 2., 3., 4., 5., 6.]).unwrap();
    let y = c.slice(x, 1, 1, 2).unwrap();
    assert_eq!(c.shape(y).unwrap().dims(), &[2, 2]);
    let mut v = [0.0; 4];
    c.read(y, &mut v).unwrap();
    assert_eq!(v, [2., 3., 5., 6.]);
    let r = c.slice(x, -2, 1, 1).unwrap();
    let mut v = [0.0; 3];
    c.read(r, &mut v).unwrap();
    assert_eq!(v, [4., 5., 6.]);
    let before = c.memory_stats().arena_used_bytes;
    for (start, len) in [(0, 0), (3, 1), (2, 2), (usize::MAX, 2), (1, usize::MAX)] {
        let e = c.slice(x, 1, start, len).unwrap_err().to_string();
        assert!(e.contains("slice: start") && e.contains("[2,3]"), "{e}");
    }
    assert!(c.slice(x, 2, 0, 1).is_err());
    assert_eq!(c.memory_stats().arena_used_bytes, before);
}

#[test]
fn gradcheck_concat_and_slice() {
    gradcheck(
        Check::new("concat axis 1", &[&[2, 1, 3], &[2, 2, 3], &[2, 3, 3]]),
        |c, x| c.concat(&[x[0], x[1], x[2]], 1),
    );
    gradcheck(Check::new("concat axis 0", &[&[1, 3], &[2, 3]]), |c, x| {
        c.concat(&[x[1], x[0]], 0)
    });
    // The same tensor twice gets both bands of the gradient.
    gradcheck(Check::new("concat x x", &[&[2, 2]]), |c, x| {
        c.concat(&[x[0], x[0]], -1)
    });
    let eight: Vec<&[usize]> = (0..super::MAX_CONCAT).map(|_| &[2usize, 1][..]).collect();
    gradcheck(Check::new("concat 8", &eight), |c, x| c.concat(x, 1));
    for axis in [0, 1, -1] {
        gradcheck(Check::new("slice", &[&[3, 4, 3]]), |c, x| {
            c.slice(x[0], axis, 1, 2)
        });
    }
    // Split then join back in the other order (slices of one input).
    gradcheck(Check::new("slice + concat", &[&[2, 5]]), |c, x| {
        let a = c.slice(x[0], 1, 0, 2)?;
        let b = c.slice(x[0], 1, 2, 3)?;
        let e = c.exp(b)?;
        c.concat(&[e, a], 1)
    });
}
