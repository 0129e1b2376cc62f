//! Tokenizer: a line as `sep_0 tok_1 sep_1 ... tok_n sep_n`, keeping every separator byte.
//!
//! Separators are runs of separator characters; tokens are the maximal runs between them. A
//! separator character is whitespace (`char::is_whitespace`, so Unicode spaces count), a `,`, or
//! a `:` right after a quoted string (JSON's `"key":value`) - all outside quoted strings. A quoted
//! string is a `"` and the next `"` not escaped by a `\`; it belongs to its token whole, spaces
//! and all, so a value's word count does not change the line's token count: `msg="disk full"` and
//! `msg="timeout"` are one token each, and `{"level":"info","msg":"disk full"}` is the tokens
//! `{"level"`, `"info"`, `"msg"` and `"disk full"}`. A `"` with no closing one is ordinary text.
//!
//! There are always `n + 1` separators, inner ones non-empty, and the concatenation in order is
//! the line, byte for byte. Each token is masked once here ([`crate::mask`]); the buffers are
//! reused from line to line.

use std::ops::Range;

use crate::fingerprint::{self, Part};
use crate::mask::{CLASS, DELIMITER, Piece, Run, mask_shaped, shape};

/// One token of a line: its byte range and its masked pieces (none means plain literal text).
#[derive(Clone, Debug)]
pub(crate) struct Tok {
    pub(crate) range: Range<usize>,
    /// Range into [`Tokens::pieces`]; empty for a token with no hole.
    pub(crate) pieces: Range<usize>,
}

/// A tokenized line. Borrow it with [`Tokens::view`] to read tokens and separators.
#[derive(Clone, Debug, Default)]
pub(crate) struct Tokens {
    seps: Vec<Range<usize>>,
    toks: Vec<Tok>,
    /// The fingerprint of each token ([`crate::fingerprint`]).
    fingerprints: Vec<u64>,
    pieces: Vec<Piece>,
    /// The runs of the token being read (`mask::Run`), handed to the masker when it ends.
    runs: Vec<Run>,
}

impl Tokens {
    /// Splits `line` into these buffers, replacing what they held.
    pub(crate) fn fill(&mut self, line: &str) {
        self.fill_with::<true>(line);
    }

    /// [`Tokens::fill`]; `SKIP` passes runs of ordinary bytes inside a token at once, and the
    /// tests hold it to the byte-at-a-time reading.
    fn fill_with<const SKIP: bool>(&mut self, line: &str) {
        self.seps.clear();
        self.toks.clear();
        self.fingerprints.clear();
        self.pieces.clear();
        let bytes = line.as_bytes();
        let mut sep_start = 0;
        let mut tok_start: Option<usize> = None;
        // The previous character closed a quoted string, so a `:` here separates.
        let mut after_quote = false;
        // A search for a closing quote failed, so every later one fails too (see
        // `closing_quote`): this keeps a line of unpaired quotes linear.
        let mut unpaired = false;
        // The open token's bytes so far, for the masker (its runs are in `self.runs`).
        let mut shapes = Shapes::default();
        let mut i = 0;
        while i < bytes.len() {
            if SKIP && let Some(start) = tok_start {
                // Inside a token an ordinary byte changes nothing but the shape: pass the run of
                // them at once, and a delimiter after it.
                let mut run = 0;
                for &b in &bytes[i..] {
                    let class = TOKEN_BYTE[usize::from(b)];
                    if class & ENDS_RUN != 0 {
                        break;
                    }
                    shapes.run |= class;
                    run += 1;
                }
                i += run;
                if let Some(&b) = bytes.get(i)
                    && TOKEN_BYTE[usize::from(b)] == IN_TOKEN_DELIMITER
                {
                    shapes.delimiter(&mut self.runs, i - start, CLASS[usize::from(b)]);
                    i += 1;
                    after_quote = false;
                    continue;
                }
                if run > 0 {
                    after_quote = false;
                    continue;
                }
            }
            let (c, len) = match bytes[i] {
                b if b.is_ascii() => (char::from(b), 1),
                _ => {
                    let c = line[i..].chars().next().unwrap_or_default();
                    (c, c.len_utf8())
                }
            };
            if c == '"' && !unpaired {
                // The string is read into a copy of the token's shapes (a new token's if none is
                // open), kept only if the string closes.
                let (start, mut quoted) = match tok_start {
                    Some(start) => (start, shapes),
                    None => {
                        self.runs.clear();
                        (i, Shapes::default())
                    }
                };
                let mark = self.runs.len();
                match closing_quote(bytes, i, start, &mut quoted, &mut self.runs) {
                    Some(close) => {
                        if tok_start.is_none() {
                            self.seps.push(sep_start..i);
                            tok_start = Some(i);
                        }
                        shapes = quoted;
                        i = close + 1;
                        after_quote = true;
                        continue;
                    }
                    None => {
                        self.runs.truncate(mark);
                        unpaired = true;
                    }
                }
            }
            let separates = c.is_whitespace() || c == ',' || (c == ':' && after_quote);
            match (separates, tok_start) {
                (true, Some(start)) => {
                    let shape = shapes.end(&mut self.runs, i - start);
                    self.push_token(line, start, i, shape);
                    tok_start = None;
                    sep_start = i;
                }
                (false, None) => {
                    self.seps.push(sep_start..i);
                    tok_start = Some(i);
                    self.runs.clear();
                    shapes = Shapes::default();
                    shapes.char(&mut self.runs, 0, &bytes[i..i + len]);
                }
                (false, Some(start)) => shapes.char(&mut self.runs, i - start, &bytes[i..i + len]),
                (true, None) => {}
            }
            after_quote = false;
            i += len;
        }
        match tok_start {
            Some(start) => {
                let shape = shapes.end(&mut self.runs, line.len() - start);
                self.push_token(line, start, line.len(), shape);
                self.seps.push(line.len()..line.len());
            }
            None => self.seps.push(sep_start..line.len()),
        }
    }

    /// Masks and notes the token at `start..end`: `shape` is `mask::shape` of its bytes and
    /// `self.runs` holds its runs ([`Shapes::end`]).
    fn push_token(&mut self, line: &str, start: usize, end: usize, shape: u8) {
        let first = self.pieces.len();
        let text = &line[start..end];
        mask_shaped(text, shape, &self.runs, &mut self.pieces);
        let pieces = &self.pieces[first..];
        self.fingerprints.push(if pieces.is_empty() {
            fingerprint::text(text)
        } else {
            fingerprint::masked(pieces.iter().map(|p| match p.hole {
                Some(kind) => Part::Hole(kind),
                None => Part::Lit(&text[p.range()]),
            }))
        });
        self.toks.push(Tok {
            range: start..end,
            pieces: first..self.pieces.len(),
        });
    }

    /// The tokens of `line`, which must be the line last passed to [`Tokens::fill`].
    pub(crate) fn view<'a>(&'a self, line: &'a str) -> LineView<'a> {
        LineView { line, t: self }
    }
}

/// Set in [`TOKEN_BYTE`] for the bytes that inside a token may end it or start a quoted string:
/// whitespace (as `char::is_whitespace` has it), `,`, `:`, `"` and every byte of a multi-byte
/// character; and in [`IN_TOKEN_DELIMITER`]. Above the masker's byte classes, which use the low
/// seven bits.
const ENDS_RUN: u8 = 0x80;

/// [`TOKEN_BYTE`]'s value for the masker's delimiters that do not end a token (`=`, `;`, `(`...):
/// a run of ordinary bytes stops there, and the token goes on after it.
const IN_TOKEN_DELIMITER: u8 = ENDS_RUN | 1;

/// Each byte's `mask::CLASS`, or [`ENDS_RUN`] for the bytes that end a run of ordinary ones
/// ([`IN_TOKEN_DELIMITER`] for those of them the token goes on after).
const TOKEN_BYTE: [u8; 256] = {
    let mut table = [0; 256];
    let mut b = 0;
    while b < 256 {
        assert!(
            CLASS[b] & ENDS_RUN == 0,
            "the masker's classes fit in seven bits"
        );
        table[b] = if b >= 128 || matches!(b as u8, b' ' | 0x09..=0x0d | b',' | b':' | b'"') {
            ENDS_RUN
        } else if CLASS[b] & DELIMITER != 0 {
            IN_TOKEN_DELIMITER
        } else {
            CLASS[b]
        };
        b += 1;
    }
    table
};

/// The index of the `"` that closes the quoted string opened at `open`: the next `"` not
/// escaped by a `\` (a `\` escapes the byte after it, so in `\\"` the quote closes). The
/// string's bytes, both quotes included, are read on the same pass into `shapes` and `runs`, as
/// bytes of the token that starts at `start`.
///
/// When none closes the string opened at `open`, none closes a later one either: a later `"`
/// at `p` was passed over by this search as the second byte of an escape (or it would have closed
/// the string), so a search from `p` reads the rest in step with this one and finds the same
/// nothing.
fn closing_quote(
    bytes: &[u8],
    open: usize,
    start: usize,
    shapes: &mut Shapes,
    runs: &mut Vec<Run>,
) -> Option<usize> {
    shapes.byte(runs, open - start, CLASS[usize::from(b'"')]);
    let mut j = open + 1;
    while let Some(&b) = bytes.get(j) {
        shapes.byte(runs, j - start, CLASS[usize::from(b)]);
        match b {
            b'\\' => {
                if let Some(&escaped) = bytes.get(j + 1) {
                    shapes.byte(runs, j + 1 - start, CLASS[usize::from(escaped)]);
                }
                j += 2;
            }
            b'"' => return Some(j),
            _ => j += 1,
        }
    }
    None
}

/// What the bytes of the token [`Tokens::fill`] is reading hold so far (`mask::shape`), for the
/// masker; the runs they end are noted in a buffer beside it.
#[derive(Clone, Copy, Debug, Default)]
struct Shapes {
    /// The token's bytes up to and including its last delimiter.
    token: u8,
    /// Its bytes since: the run it is in.
    run: u8,
}

impl Shapes {
    /// A byte of class `class` (`mask::CLASS`) at `at` in the token.
    fn byte(&mut self, runs: &mut Vec<Run>, at: usize, class: u8) {
        if class & DELIMITER == 0 {
            self.run |= class;
        } else {
            self.delimiter(runs, at, class);
        }
    }

    /// A delimiter of class `class` at `at` in the token ends the run it is in.
    fn delimiter(&mut self, runs: &mut Vec<Run>, at: usize, class: u8) {
        runs.push(Run {
            end: at,
            shape: self.run,
        });
        self.token |= self.run | class;
        self.run = 0;
    }

    /// The token ends `len` bytes from its start: its last run is noted (if it has a delimiter,
    /// the only case the masker reads them) and its shape returned.
    fn end(self, runs: &mut Vec<Run>, len: usize) -> u8 {
        if self.token & DELIMITER != 0 {
            runs.push(Run {
                end: len,
                shape: self.run,
            });
        }
        self.token | self.run
    }

    /// The character `c` (its bytes) at `at` in the token.
    fn char(&mut self, runs: &mut Vec<Run>, at: usize, c: &[u8]) {
        match c {
            [b] => self.byte(runs, at, CLASS[usize::from(*b)]),
            // No delimiter is more than a byte long.
            _ => self.run |= shape(c),
        }
    }
}

/// A tokenized line with its text.
#[derive(Clone, Copy, Debug)]
pub(crate) struct LineView<'a> {
    line: &'a str,
    t: &'a Tokens,
}

impl<'a> LineView<'a> {
    pub(crate) fn token_count(&self) -> usize {
        self.t.toks.len()
    }

    /// The line's length in bytes.
    pub(crate) fn len(&self) -> usize {
        self.line.len()
    }

    pub(crate) fn sep(&self, i: usize) -> &'a str {
        &self.line[self.sep_range(i)]
    }

    /// Where separator `i` is in the line.
    pub(crate) fn sep_range(&self, i: usize) -> Range<usize> {
        self.t.seps[i].clone()
    }

    /// Where token `i` is in the line.
    pub(crate) fn token_range(&self, i: usize) -> Range<usize> {
        self.t.toks[i].range.clone()
    }

    /// The line.
    pub(crate) fn text(&self) -> &'a str {
        self.line
    }

    /// [`LineView::sep`]'s bytes, without the check that its ends are character boundaries
    /// (they are: `fill` cuts only there).
    pub(crate) fn sep_bytes(&self, i: usize) -> &'a [u8] {
        &self.line.as_bytes()[self.sep_range(i)]
    }

    pub(crate) fn token(&self, i: usize) -> &'a str {
        &self.line[self.token_range(i)]
    }

    /// Token `i`'s bytes (without the check that its ends are character boundaries) and its
    /// pieces, for the comparison of a template's slot with it: one lookup of the token.
    pub(crate) fn token_bytes_and_pieces(&self, i: usize) -> (&'a [u8], &'a [Piece]) {
        let tok = &self.t.toks[i];
        (
            &self.line.as_bytes()[tok.range.clone()],
            &self.t.pieces[tok.pieces.clone()],
        )
    }

    /// Every separator's bytes ([`LineView::sep_bytes`]), in order.
    pub(crate) fn seps_bytes(&self) -> impl Iterator<Item = &'a [u8]> {
        let bytes = self.line.as_bytes();
        self.t.seps.iter().map(move |r| &bytes[r.clone()])
    }

    /// The fingerprint of every token, in order.
    pub(crate) fn fingerprints(&self) -> &'a [u64] {
        &self.t.fingerprints
    }

    /// The masked pieces of token `i`; empty when the token is plain literal text.
    pub(crate) fn pieces(&self, i: usize) -> &'a [Piece] {
        &self.t.pieces[self.t.toks[i].pieces.clone()]
    }

    /// The key token `i` descends the prefix tree by: `None` (the wildcard branch) for a token
    /// holding a hole or a digit (Drain's rule), its text otherwise.
    pub(crate) fn tree_key(&self, i: usize) -> Option<&'a str> {
        let text = self.token(i);
        if !self.pieces(i).is_empty() || text.bytes().any(|b| b.is_ascii_digit()) {
            None
        } else {
            Some(text)
        }
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    fn split(line: &str) -> (Vec<String>, Vec<String>) {
        let mut t = Tokens::default();
        t.fill(line);
        let v = t.view(line);
        let seps = (0..=v.token_count()).map(|i| v.sep(i).to_owned()).collect();
        let toks = (0..v.token_count())
            .map(|i| v.token(i).to_owned())
            .collect();
        (seps, toks)
    }

    fn assert_split(line: &str, seps: &[&str], toks: &[&str]) {
        let (s, t) = split(line);
        assert_eq!(s, seps, "{line:?}");
        assert_eq!(t, toks, "{line:?}");
        let mut joined = s[0].clone();
        for (tok, sep) in t.iter().zip(&s[1..]) {
            joined.push_str(tok);
            joined.push_str(sep);
        }
        assert_eq!(joined, line);
    }

    /// Proves the split keeps every separator byte, including leading, trailing and Unicode
    /// whitespace, and an empty or all-blank line.
    /// Reasoned mutation (not run as a mutant): push `line.len()..line.len()` instead of
    /// `sep_start..line.len()` for a trailing separator and the " a \t" row fails.
    #[test]
    fn tokenize_keeps_separators() {
        let cases: [(&str, &[&str], &[&str]); 6] = [
            ("", &[""], &[]),
            ("   ", &["   "], &[]),
            ("a", &["", ""], &["a"]),
            (" a \t", &[" ", " \t"], &["a"]),
            ("a  b\tc", &["", "  ", "\t", ""], &["a", "b", "c"]),
            ("x\u{3000}y", &["", "\u{3000}", ""], &["x", "y"]),
        ];
        for (line, seps, toks) in cases {
            assert_split(line, seps, toks);
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(5_000))]

        /// Proves passing a token's ordinary bytes at once splits every line as reading it byte
        /// by byte does: same separators, tokens, masked pieces and fingerprints, over lines of
        /// quotes, escapes, commas, colons, Unicode spaces and multi-byte text; and that both
        /// hand the masker the shape of the token's bytes and its runs between delimiters
        /// (`mask_shaped`'s debug assertions).
        /// Mutation check (tried by hand): let `TOKEN_BYTE` pass `:` (no `ENDS_RUN`) and this
        /// fails on a line of quotes and a `:`; leave a quoted string's bytes out of the shape,
        /// or only the byte a `\` escapes (`closing_quote`), and it fails on the assertion; note
        /// that byte's class without ending a run at it (`"\"\\\t\""`), or let `TOKEN_BYTE`
        /// pass `=` and `{` as ordinary bytes (`"={"`), and it fails on the runs' assertion.
        #[test]
        fn skipping_ordinary_bytes_splits_as_byte_by_byte(
            line in "[a1: ,\"\\\\\t=/.{}é\u{3000}\u{85}]{0,60}"
        ) {
            let mut fast = Tokens::default();
            fast.fill_with::<true>(&line);
            let mut slow = Tokens::default();
            slow.fill_with::<false>(&line);
            prop_assert_eq!(&fast.seps, &slow.seps);
            prop_assert_eq!(
                fast.toks.iter().map(|t| (t.range.clone(), t.pieces.clone())).collect::<Vec<_>>(),
                slow.toks.iter().map(|t| (t.range.clone(), t.pieces.clone())).collect::<Vec<_>>()
            );
            prop_assert_eq!(&fast.pieces, &slow.pieces);
            prop_assert_eq!(&fast.fingerprints, &slow.fingerprints);
        }
    }

    /// Proves quoted strings stay whole (spaces, commas, escaped quotes and all), commas
    /// separate, a `:` separates only right after a quoted string, and an unpaired quote is text.
    /// Reasoned mutation (not run as a mutant): drop the `closing_quote` branch, or the `,` or
    /// the `:` rule, and a row fails; always treat a `"` as opening and the unpaired rows fail.
    #[test]
    fn quoted_strings_and_json_separators() {
        let cases: [(&str, &[&str], &[&str]); 9] = [
            (
                r#"msg="disk full" code=7"#,
                &["", " ", ""],
                &[r#"msg="disk full""#, "code=7"],
            ),
            (
                r#"{"level":"info","msg":"disk full, again"}"#,
                &["", ":", ",", ":", ""],
                &[
                    r#"{"level""#,
                    r#""info""#,
                    r#""msg""#,
                    r#""disk full, again"}"#,
                ],
            ),
            (
                r#"{"a": 1, "b": [2,3]}"#,
                &["", ": ", ", ", ": ", ",", ""],
                &[r#"{"a""#, "1", r#""b""#, "[2", "3]}"],
            ),
            (
                r#""say \"hi there\"" ok"#,
                &["", " ", ""],
                &[r#""say \"hi there\"""#, "ok"],
            ),
            (r#""a\\" b""#, &["", " ", ""], &[r#""a\\""#, r#"b""#]),
            (
                "at 10:00:01, retry",
                &["", " ", ", ", ""],
                &["at", "10:00:01", "retry"],
            ),
            (
                r#"he said "no and left"#,
                &["", " ", " ", " ", " ", ""],
                &["he", "said", r#""no"#, "and", "left"],
            ),
            (
                r#""a b" "c d"#,
                &["", " ", " ", ""],
                &[r#""a b""#, r#""c"#, "d"],
            ),
            (r#""k":"v""#, &["", ":", ""], &[r#""k""#, r#""v""#]),
        ];
        for (line, seps, toks) in cases {
            assert_split(line, seps, toks);
        }
    }
}
