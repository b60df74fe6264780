//! Training text for the model tests.

use super::gpt::Rng;

/// The tiny Shakespeare corpus, when the data folder next to the repository
/// has it (the model tests pin different losses for it and for
/// [`generated_text`]).
pub fn shakespeare_tiny() -> Option<Vec<u8>> {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../shared/data/shakespeare_tiny.txt"
    );
    std::fs::read(path).ok().filter(|t| t.len() > 10_000)
}

/// Pseudo-English from a fixed word list and a fixed seed.
pub fn generated_text(n: usize) -> Vec<u8> {
    const WORDS: &[&str] = &[
        "the", "king", "queen", "lord", "of", "and", "to", "my", "a", "is", "that", "in", "thou",
        "thee", "love", "what", "shall", "be", "not", "with", "her", "his", "sweet", "night",
    ];
    let mut rng = Rng(2024);
    let mut t = Vec::with_capacity(n + 16);
    while t.len() < n {
        t.extend_from_slice(WORDS[rng.below(WORDS.len())].as_bytes());
        t.push(match rng.below(12) {
            0 => b'.',
            1 => b'\n',
            2 => b',',
            _ => b' ',
        });
    }
    t
}
