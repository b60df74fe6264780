//! Times GPT-2 encoding of a whole file in one call: the vocabulary is
//! loaded once (not timed), then the file is encoded `--reps` times and the
//! median is printed, in the form scripts/bench_tokenizer.py reads.
//!
//!     cargo run --release --example bench_tokenizer -- \
//!         [--vocab data/gpt2] [--text ../shared/data/shakespeare.txt] [--reps 5]

use arenagrad::tokenizer::Tokenizer;
use std::path::PathBuf;
use std::time::Instant;

fn main() {
    let mut vocab = PathBuf::from("data/gpt2");
    let mut text = PathBuf::from("../shared/data/shakespeare.txt");
    let mut reps = 5usize;
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        let mut value = || args.next().unwrap_or_else(|| panic!("{a} needs a value"));
        match a.as_str() {
            "--vocab" => vocab = value().into(),
            "--text" => text = value().into(),
            "--reps" => reps = value().parse().expect("--reps takes a count"),
            _ => panic!("unknown argument {a}"),
        }
    }
    let mut tok = Tokenizer::from_files(vocab.join("encoder.json"), vocab.join("vocab.bpe"))
        .unwrap_or_else(|e| panic!("{e} (run `make tokenizer-data`)"));
    let bytes = std::fs::read(&text).unwrap_or_else(|e| panic!("{}: {e}", text.display()));
    let mut ids = Vec::new();
    let mut seconds = Vec::with_capacity(reps);
    for _ in 0..reps.max(1) {
        ids.clear();
        let start = Instant::now();
        tok.encode(&bytes, false, &mut ids);
        seconds.push(start.elapsed().as_secs_f64());
    }
    seconds.sort_by(f64::total_cmp);
    let median = seconds[seconds.len() / 2];
    println!(
        "arenagrad: {} bytes -> {} ids, median {:.1} ms of {} ({:.1} MB/s)",
        bytes.len(),
        ids.len(),
        median * 1e3,
        seconds.len(),
        bytes.len() as f64 / median / 1e6
    );
}
