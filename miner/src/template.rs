//! Templates: what a cluster of lines has in common, and the slots where they differ.
//!
//! A template has the shape of a tokenized line: `n` token slots and `n + 1` separator slots.
//! A token slot is literal text, a masked token (literal pieces and typed holes such as
//! `user=<NUM>`), or the wildcard `<*>`; a separator slot is a literal run of separator
//! characters (whitespace, `,`, a `:` after a quoted string: [`crate::tokens`]) or the
//! separator wildcard `<_>`. Every hole and wildcard is one parameter, in slot order, so
//! [`Template::reconstruct`] gives back the original line byte for byte.
//!
//! The rendered form (`Display`) is what audit events carry: a literal `\` or `<` is escaped with
//! `\`, everything else is written as it is. It parses back ([`Template::parse`]) into a template
//! that takes the same parameters and rebuilds the same lines from them; its slots can differ
//! from the miner's, since a rendering does not mark where a separator of `,` or `:` meets a token
//! ([`crate::tokens`]). A snapshot stores templates slot by slot ([`Template::to_slots`]) instead.

use std::fmt;
use std::ops::Range;
use std::str::FromStr;

use thiserror::Error;

use crate::fingerprint::{self, Part};
use crate::mask::MaskKind;
use crate::params::Params;
use crate::tokens::LineView;

/// The rendering of a token wildcard.
pub const TOKEN_WILDCARD: &str = "<*>";
/// The rendering of a separator wildcard.
pub const SEPARATOR_WILDCARD: &str = "<_>";

/// The longest line the miner mines, and the longest text a template holds: a template's slots
/// are 32-bit ranges of one buffer. The miner records a longer line whole, as it records a line
/// past its template cap ([`crate::TenantMiner::ingest`]).
pub const MAX_MINED_LINE_BYTES: usize = u32::MAX as usize;

/// A mined template: literal text, typed holes and wildcards, in the shape of a line.
///
/// Its literal text is one buffer and every slot a range of it. A template of a long line has
/// hundreds of slots, and with a `String` for each the slots cost more than their text: they
/// were most of a tenant's miner.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Template {
    /// The literal text of every slot in slot order: separators and tokens alternating, a masked
    /// token's literal pieces in order. Every template is laid out by [`Builder`], so equal
    /// templates have equal buffers and the derived equality is equality of slots.
    text: Box<str>,
    /// `tokens.len() + 1` separator slots.
    seps: Box<[SepSlot]>,
    tokens: Box<[TokenSlot]>,
    /// The pieces of every masked token, in token order; a [`TokenSlot::Masked`] holds its run.
    pieces: Box<[TPiece]>,
    /// Derived from `tokens` by [`Builder::finish`], for comparing lines quickly: the number of
    /// slots that are not `<*>`, and each slot's fingerprint ([`crate::fingerprint`]).
    literal: usize,
    fingerprints: Box<[u64]>,
}

/// A range of a template's text, or of its pieces for a masked token.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Span {
    start: u32,
    end: u32,
}

impl Span {
    fn range(self) -> Range<usize> {
        self.start as usize..self.end as usize
    }
}

/// An offset into a template's text or pieces, which [`MAX_MINED_LINE_BYTES`] keeps in 32 bits:
/// a template's text and its piece count are at most the length of the line, rendering or
/// snapshot slots it was built from, and each of those is checked against it first.
fn offset(n: usize) -> u32 {
    u32::try_from(n).expect("template text within MAX_MINED_LINE_BYTES: checked where it enters")
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum SepSlot {
    Any,
    Lit(Span),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum TokenSlot {
    Any,
    Text(Span),
    /// The token's run of [`Template::pieces`]: at least one hole, adjacent literal pieces
    /// merged.
    Masked(Span),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum TPiece {
    Lit(Span),
    Hole(MaskKind),
}

/// Lays a template out slot by slot, in the order of a line: separator, token, separator, ...,
/// separator. Every template is made by one, so its text is in slot order (see
/// [`Template::text`]).
struct Builder {
    text: String,
    seps: Vec<SepSlot>,
    tokens: Vec<TokenSlot>,
    pieces: Vec<TPiece>,
}

impl Builder {
    fn with_capacity(tokens: usize, text: usize) -> Builder {
        Builder {
            text: String::with_capacity(text),
            seps: Vec::with_capacity(tokens + 1),
            tokens: Vec::with_capacity(tokens),
            pieces: Vec::new(),
        }
    }

    fn span(&mut self, s: &str) -> Span {
        let start = offset(self.text.len());
        self.text.push_str(s);
        Span {
            start,
            end: offset(self.text.len()),
        }
    }

    /// A separator slot: its literal text, `None` for `<_>`.
    fn sep(&mut self, sep: Option<&str>) {
        let slot = match sep {
            None => SepSlot::Any,
            Some(s) => SepSlot::Lit(self.span(s)),
        };
        self.seps.push(slot);
    }

    fn any_token(&mut self) {
        self.tokens.push(TokenSlot::Any);
    }

    fn text_token(&mut self, s: &str) {
        let span = self.span(s);
        self.tokens.push(TokenSlot::Text(span));
    }

    /// A token with holes, from its pieces (adjacent literal pieces merged by the caller).
    fn masked_token<'a>(&mut self, parts: impl IntoIterator<Item = Part<'a>>) {
        let start = offset(self.pieces.len());
        for part in parts {
            let piece = match part {
                Part::Lit(s) => TPiece::Lit(self.span(s)),
                Part::Hole(kind) => TPiece::Hole(kind),
            };
            self.pieces.push(piece);
        }
        let end = offset(self.pieces.len());
        self.tokens.push(TokenSlot::Masked(Span { start, end }));
    }

    fn finish(self) -> Template {
        let mut template = Template {
            text: self.text.into_boxed_str(),
            seps: self.seps.into_boxed_slice(),
            tokens: self.tokens.into_boxed_slice(),
            pieces: self.pieces.into_boxed_slice(),
            literal: 0,
            fingerprints: Box::default(),
        };
        template.fingerprints = (0..template.tokens.len())
            .map(|i| match template.tokens[i] {
                TokenSlot::Any => fingerprint::WILDCARD,
                TokenSlot::Text(s) => fingerprint::text(template.str(s)),
                TokenSlot::Masked(p) => fingerprint::masked(template.parts(p)),
            })
            .collect();
        template.literal = template
            .tokens
            .iter()
            .filter(|t| !matches!(t, TokenSlot::Any))
            .count();
        template
    }
}

/// How a line compares with a template of the same length.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Similarity {
    /// Non-wildcard token slots equal to the line's token.
    pub(crate) equal: usize,
    /// Non-wildcard token slots.
    pub(crate) literal: usize,
    /// Wildcard token slots.
    pub(crate) wildcards: usize,
}

impl Similarity {
    /// `equal / literal`, exactly, as a comparison against `threshold`; a template with no
    /// literal slot matches every line of its length.
    pub(crate) fn reaches(&self, threshold: f64) -> bool {
        self.literal == 0 || self.equal as f64 >= threshold * self.literal as f64
    }

    /// Whether every non-wildcard slot is equal to the line's token (the wildcards take any).
    pub(crate) fn every_literal_equal(&self) -> bool {
        self.equal == self.literal
    }

    /// Whether `self` is a strictly better match than `other`: higher similarity (compared by
    /// cross-multiplication, no rounding), then more wildcards (Drain's tie-break).
    pub(crate) fn better_than(&self, other: &Similarity) -> bool {
        let (a_eq, a_lit) = self.ratio();
        let (b_eq, b_lit) = other.ratio();
        let lhs = a_eq * b_lit;
        let rhs = b_eq * a_lit;
        lhs > rhs || (lhs == rhs && self.wildcards > other.wildcards)
    }

    /// The similarity as a fraction; a template without literal slots has similarity 1/1.
    fn ratio(&self) -> (u128, u128) {
        if self.literal == 0 {
            (1, 1)
        } else {
            (self.equal as u128, self.literal as u128)
        }
    }
}

impl Template {
    /// The text of `span`.
    fn str(&self, span: Span) -> &str {
        &self.text[span.range()]
    }

    /// [`Template::str`]'s bytes, without the check that its ends are character boundaries
    /// (they are: every span is cut where a line's token, separator or piece is).
    fn bytes(&self, span: Span) -> &[u8] {
        &self.text.as_bytes()[span.range()]
    }

    /// The pieces of a masked token, its run `pieces` of [`Template::pieces`].
    fn parts(&self, pieces: Span) -> impl Iterator<Item = Part<'_>> {
        self.pieces[pieces.range()].iter().map(|p| match *p {
            TPiece::Lit(s) => Part::Lit(self.str(s)),
            TPiece::Hole(kind) => Part::Hole(kind),
        })
    }

    /// The template of one line: every token as masked, every separator literal. The line is at
    /// most [`MAX_MINED_LINE_BYTES`] long.
    pub(crate) fn from_line(line: &LineView<'_>) -> Template {
        let n = line.token_count();
        let mut b = Builder::with_capacity(n, line.len());
        for i in 0..=n {
            b.sep(Some(line.sep(i)));
            if i == n {
                break;
            }
            let text = line.token(i);
            let pieces = line.pieces(i);
            if pieces.is_empty() {
                b.text_token(text);
            } else {
                b.masked_token(pieces.iter().map(|p| match p.hole {
                    Some(kind) => Part::Hole(kind),
                    None => Part::Lit(&text[p.range()]),
                }));
            }
        }
        b.finish()
    }

    /// Number of token slots (the line length this template matches).
    pub fn token_count(&self) -> usize {
        self.tokens.len()
    }

    /// Number of parameters a line of this template carries.
    pub fn param_count(&self) -> usize {
        let seps = self
            .seps
            .iter()
            .filter(|s| matches!(s, SepSlot::Any))
            .count();
        let toks: usize = self
            .tokens
            .iter()
            .map(|t| match *t {
                TokenSlot::Any => 1,
                TokenSlot::Text(_) => 0,
                TokenSlot::Masked(p) => self.pieces[p.range()]
                    .iter()
                    .filter(|p| matches!(p, TPiece::Hole(_)))
                    .count(),
            })
            .sum();
        seps + toks
    }

    /// Number of token slots that are not the `<*>` wildcard (literal or masked).
    pub fn literal_token_count(&self) -> usize {
        self.literal
    }

    /// Rebuilds a line from its parameters, in slot order.
    ///
    /// # Errors
    /// [`ReconstructError`] when `params` does not hold exactly [`Template::param_count`] values.
    pub fn reconstruct<I>(&self, params: I) -> Result<String, ReconstructError>
    where
        I: IntoIterator,
        I::Item: AsRef<str>,
        I::IntoIter: ExactSizeIterator,
    {
        let mut params = params.into_iter();
        let expected = self.param_count();
        if params.len() != expected {
            return Err(ReconstructError {
                expected,
                found: params.len(),
                template: self.to_string(),
            });
        }
        // `expected` was checked above, so every `next()` below yields a value.
        let mut push_next = |out: &mut String| {
            if let Some(p) = params.next() {
                out.push_str(p.as_ref());
            }
        };
        let mut out = String::new();
        for (i, sep) in self.seps.iter().enumerate() {
            match *sep {
                SepSlot::Any => push_next(&mut out),
                SepSlot::Lit(s) => out.push_str(self.str(s)),
            }
            let Some(&tok) = self.tokens.get(i) else {
                break;
            };
            match tok {
                TokenSlot::Any => push_next(&mut out),
                TokenSlot::Text(s) => out.push_str(self.str(s)),
                TokenSlot::Masked(p) => {
                    for piece in &self.pieces[p.range()] {
                        match *piece {
                            TPiece::Lit(s) => out.push_str(self.str(s)),
                            TPiece::Hole(_) => push_next(&mut out),
                        }
                    }
                }
            }
        }
        Ok(out)
    }

    /// Parses a rendered template (the form audit events carry) back into a template that takes
    /// the same parameters and rebuilds the same lines from them (see the module's notes: its
    /// slots can differ from the miner's). Every rendering this crate has written parses,
    /// including those of builds that split tokens at whitespace alone.
    ///
    /// # Errors
    /// [`TemplateParseError`] when `s` is not the rendering of any template.
    pub fn parse(s: &str) -> Result<Template, TemplateParseError> {
        parse(s)
    }

    /// Whether token slot `i` accepts token `i` of `line` without widening.
    #[inline]
    fn token_matches(&self, i: usize, line: &LineView<'_>) -> bool {
        let (text, lp) = line.token_bytes_and_pieces(i);
        match self.tokens[i] {
            TokenSlot::Any => true,
            TokenSlot::Text(s) => lp.is_empty() && short_eq(self.bytes(s), text),
            TokenSlot::Masked(p) => {
                let tp = &self.pieces[p.range()];
                tp.len() == lp.len()
                    && tp.iter().zip(lp).all(|(t, l)| match (*t, l.hole) {
                        (TPiece::Lit(s), None) => short_eq(self.bytes(s), &text[l.range()]),
                        (TPiece::Hole(a), Some(b)) => a == b,
                        _ => false,
                    })
            }
        }
    }

    fn sep_matches(&self, i: usize, line: &LineView<'_>) -> bool {
        self.sep_slot_matches(self.seps[i], line.sep_bytes(i))
    }

    #[inline]
    fn sep_slot_matches(&self, slot: SepSlot, sep: &[u8]) -> bool {
        match slot {
            SepSlot::Any => true,
            SepSlot::Lit(s) => short_eq(self.bytes(s), sep),
        }
    }

    /// Whether every separator slot accepts its separator of `line` (of this template's token
    /// count): [`Template::sep_matches`] for each, in one walk of both.
    fn seps_match(&self, line: &LineView<'_>) -> bool {
        // Zipped, a line of another count would be compared on its shorter part; none is.
        debug_assert_eq!(self.seps.len(), line.token_count() + 1);
        self.seps
            .iter()
            .zip(line.seps_bytes())
            .all(|(slot, sep)| self.sep_slot_matches(*slot, sep))
    }

    /// Compares `line` (of the same token count) with this template: every slot. The
    /// specification `similarity_reaching` is tested against.
    #[cfg(test)]
    pub(crate) fn similarity(&self, line: &LineView<'_>) -> Similarity {
        let mut sim = Similarity {
            equal: 0,
            literal: 0,
            wildcards: 0,
        };
        for (i, slot) in self.tokens.iter().enumerate() {
            if matches!(slot, TokenSlot::Any) {
                sim.wildcards += 1;
            } else {
                sim.literal += 1;
                if self.token_matches(i, line) {
                    sim.equal += 1;
                }
            }
        }
        sim
    }

    /// [`Template::similarity`] when it reaches `threshold`, else `None`: `Some(s)` exactly when
    /// `s.reaches(threshold)`, with `s` the full similarity. `best_match` compares a line with
    /// every cluster of its leaf, and most of them are far from it, so the fingerprints go
    /// first: a slot whose fingerprint differs from its token's differs (equal tokens have equal
    /// fingerprints, and a `<*>` slot's equals none), so the count of equal fingerprints bounds
    /// `equal` from above in one pass of integer comparisons, and a cluster that cannot reach
    /// the threshold by that bound is refused without comparing text. The text comparison runs
    /// only on slots whose fingerprints agree, where a hash collision would otherwise count.
    pub(crate) fn similarity_reaching(
        &self,
        line: &LineView<'_>,
        threshold: f64,
    ) -> Option<Similarity> {
        let theirs = line.fingerprints();
        let mut sim = Similarity {
            equal: self
                .fingerprints
                .iter()
                .zip(theirs)
                .filter(|(a, b)| a == b)
                .count(),
            literal: self.literal,
            wildcards: self.tokens.len() - self.literal,
        };
        if !sim.reaches(threshold) {
            return None;
        }
        sim.equal = (0..self.tokens.len())
            .filter(|&i| self.fingerprints[i] == theirs[i] && self.token_matches(i, line))
            .count();
        sim.reaches(threshold).then_some(sim)
    }

    /// The template widened to accept `line`, whose similarity with this template is `sim`
    /// (as [`Template::similarity_reaching`] found it), or `None` when it already accepts it.
    ///
    /// Every token slot that differs becomes `<*>`, every separator that differs becomes `<_>`.
    /// When `sim` says every literal slot is equal, the tokens are not compared a second time:
    /// a line that joins its template unchanged, the common case, costs one comparison of its
    /// text, not two.
    pub(crate) fn widened_from(&self, line: &LineView<'_>, sim: &Similarity) -> Option<Template> {
        self.widened_knowing(line, sim.every_literal_equal())
    }

    /// [`Template::widened_from`] comparing every token: the specification it is tested
    /// against.
    #[cfg(test)]
    pub(crate) fn widened(&self, line: &LineView<'_>) -> Option<Template> {
        self.widened_knowing(line, false)
    }

    fn widened_knowing(&self, line: &LineView<'_>, tokens_equal: bool) -> Option<Template> {
        let n = self.tokens.len();
        let unchanged =
            self.seps_match(line) && (tokens_equal || (0..n).all(|i| self.token_matches(i, line)));
        if unchanged {
            return None;
        }
        let mut b = Builder::with_capacity(n, self.text.len());
        for i in 0..=n {
            match self.seps[i] {
                SepSlot::Lit(s) if self.sep_matches(i, line) => b.sep(Some(self.str(s))),
                _ => b.sep(None),
            }
            if i == n {
                break;
            }
            if !self.token_matches(i, line) {
                b.any_token();
                continue;
            }
            match self.tokens[i] {
                TokenSlot::Any => b.any_token(),
                TokenSlot::Text(s) => b.text_token(self.str(s)),
                TokenSlot::Masked(p) => b.masked_token(self.parts(p)),
            }
        }
        Some(b.finish())
    }

    /// The parameters of `line`, which this template must accept (see [`Template::widened`]),
    /// in buffers of their exact size: one walk of the template finds them (their byte ranges
    /// in the line, into `ranges`, a buffer the caller reuses), then they are copied.
    pub(crate) fn params(&self, line: &LineView<'_>, ranges: &mut Vec<Range<usize>>) -> Params {
        ranges.clear();
        for (i, sep) in self.seps.iter().enumerate() {
            if matches!(sep, SepSlot::Any) {
                ranges.push(line.sep_range(i));
            }
            let Some(tok) = self.tokens.get(i) else {
                break;
            };
            match tok {
                TokenSlot::Any => ranges.push(line.token_range(i)),
                TokenSlot::Text(_) => {}
                TokenSlot::Masked(_) => {
                    let start = line.token_range(i).start;
                    let holes = line.pieces(i).iter().filter(|p| p.hole.is_some());
                    ranges.extend(holes.map(|p| start + p.start..start + p.end));
                }
            }
        }
        let bytes = ranges.iter().map(|r| r.len()).sum();
        let mut out = Params::with_capacity(ranges.len(), bytes);
        let text = line.text();
        for r in ranges.iter() {
            out.push(&text[r.clone()]);
        }
        out
    }

    /// The template slot by slot, as a snapshot stores it: separators and tokens alternating,
    /// first and last a separator; `None` for a wildcard, a literal separator as its text, a
    /// token as its rendering. Unlike the rendering of the whole template, this says where each
    /// slot ends, which a separator of `,` or `:` beside a token does not.
    pub(crate) fn to_slots(&self) -> Vec<Option<String>> {
        let mut out = Vec::with_capacity(self.seps.len() + self.tokens.len());
        for (i, sep) in self.seps.iter().enumerate() {
            out.push(match *sep {
                SepSlot::Any => None,
                SepSlot::Lit(s) => Some(self.str(s).to_owned()),
            });
            let Some(&tok) = self.tokens.get(i) else {
                break;
            };
            out.push(match tok {
                TokenSlot::Any => None,
                tok => {
                    let mut text = String::new();
                    // Writing to a `String` cannot fail.
                    let _ = self.render_token(&mut text, tok);
                    Some(text)
                }
            });
        }
        out
    }

    /// Reads back what [`Template::to_slots`] wrote.
    ///
    /// # Errors
    /// A description of the first slot that is not what `to_slots` writes (an even count, a
    /// token that does not parse, text past [`MAX_MINED_LINE_BYTES`], or a template
    /// [`Template::check`] refuses).
    pub(crate) fn from_slots(slots: Vec<Option<String>>) -> Result<Template, String> {
        if slots.len().is_multiple_of(2) {
            return Err(format!(
                "a template has an odd number of slots, not {}",
                slots.len()
            ));
        }
        let text: usize = slots.iter().flatten().map(String::len).sum();
        if text > MAX_MINED_LINE_BYTES {
            return Err(format!(
                "a template's slots hold {text} bytes, more than {MAX_MINED_LINE_BYTES}"
            ));
        }
        let mut b = Builder::with_capacity(slots.len() / 2, text);
        for (i, slot) in slots.iter().enumerate() {
            if i % 2 == 0 {
                b.sep(slot.as_deref());
            } else {
                match slot {
                    None => b.any_token(),
                    Some(text) => b.parsed_token(&parse_token(text)?),
                }
            }
        }
        let template = b.finish();
        template.check()?;
        Ok(template)
    }

    /// Checks the structural invariants a decoded snapshot must hold before it is trusted.
    pub(crate) fn check(&self) -> Result<(), String> {
        if self.seps.len() != self.tokens.len() + 1 {
            return Err(format!(
                "template has {} separators for {} tokens",
                self.seps.len(),
                self.tokens.len()
            ));
        }
        for &slot in &self.tokens {
            let ok = match slot {
                TokenSlot::Any => true,
                TokenSlot::Text(s) => !s.range().is_empty(),
                TokenSlot::Masked(p) => self.pieces[p.range()]
                    .iter()
                    .any(|p| matches!(p, TPiece::Hole(_))),
            };
            if !ok {
                let mut text = String::new();
                let _ = self.render_token(&mut text, slot);
                return Err(format!("malformed token slot {text:?}"));
            }
        }
        Ok(())
    }

    /// Heap bytes held by this template: its text and its slices (allocator rounding aside).
    pub(crate) fn heap_bytes(&self) -> usize {
        self.text.len()
            + size_of_val(&*self.seps)
            + size_of_val(&*self.tokens)
            + size_of_val(&*self.pieces)
            + size_of_val(&*self.fingerprints)
    }

    /// Writes one token slot as a rendering shows it.
    fn render_token(&self, out: &mut impl fmt::Write, tok: TokenSlot) -> fmt::Result {
        match tok {
            TokenSlot::Any => out.write_str(TOKEN_WILDCARD),
            TokenSlot::Text(s) => push_escaped(out, self.str(s)),
            TokenSlot::Masked(p) => {
                for part in self.parts(p) {
                    match part {
                        Part::Lit(s) => push_escaped(out, s)?,
                        Part::Hole(kind) => out.write_str(kind.placeholder())?,
                    }
                }
                Ok(())
            }
        }
    }
}

fn push_escaped(out: &mut impl fmt::Write, s: &str) -> fmt::Result {
    for c in s.chars() {
        if c == '\\' || c == '<' {
            out.write_char('\\')?;
        }
        out.write_char(c)?;
    }
    Ok(())
}

impl fmt::Display for Template {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, sep) in self.seps.iter().enumerate() {
            match *sep {
                SepSlot::Any => f.write_str(SEPARATOR_WILDCARD)?,
                SepSlot::Lit(s) => f.write_str(self.str(s))?,
            }
            let Some(&tok) = self.tokens.get(i) else {
                break;
            };
            self.render_token(f, tok)?;
        }
        Ok(())
    }
}

impl FromStr for Template {
    type Err = TemplateParseError;

    fn from_str(s: &str) -> Result<Template, TemplateParseError> {
        parse(s)
    }
}

/// A parameter list that does not fit its template.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error("template {template:?} takes {expected} parameters, {found} given")]
pub struct ReconstructError {
    /// Parameters the template takes.
    pub expected: usize,
    /// Parameters given.
    pub found: usize,
    /// The rendered template.
    pub template: String,
}

/// A string that is not the rendering of a template.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum TemplateParseError {
    /// `<` starts something that is not a known placeholder (a literal `<` is written `\<`).
    #[error("unknown placeholder at byte {offset} of {template:?}")]
    UnknownPlaceholder {
        /// Byte offset of the `<`.
        offset: usize,
        /// The input.
        template: String,
    },
    /// A `\` at the end of the input or before whitespace.
    #[error("dangling escape at byte {offset} of {template:?}")]
    DanglingEscape {
        /// Byte offset of the `\`.
        offset: usize,
        /// The input.
        template: String,
    },
    /// A rendering longer than [`MAX_MINED_LINE_BYTES`], so longer than any template's.
    #[error("a template rendering of {len} bytes is longer than any template's")]
    TooLong {
        /// Its length in bytes.
        len: usize,
    },
    /// A separator slot that mixes whitespace and `<_>`, or holds `<_>` twice.
    #[error("separator mixes whitespace and <_> at byte {offset} of {template:?}")]
    MixedSeparator {
        /// Byte offset of the second part.
        offset: usize,
        /// The input.
        template: String,
    },
}

/// A token as a rendering spells it, read before its template is laid out.
enum ParsedToken {
    Any,
    Text(String),
    /// At least one hole; adjacent literal pieces merged.
    Masked(Vec<ParsedPiece>),
}

enum ParsedPiece {
    Lit(String),
    Hole(MaskKind),
}

impl Builder {
    fn parsed_token(&mut self, tok: &ParsedToken) {
        match tok {
            ParsedToken::Any => self.any_token(),
            ParsedToken::Text(s) => self.text_token(s),
            ParsedToken::Masked(pieces) => self.masked_token(pieces.iter().map(|p| match p {
                ParsedPiece::Lit(s) => Part::Lit(s),
                ParsedPiece::Hole(kind) => Part::Hole(*kind),
            })),
        }
    }
}

enum Unit<'a> {
    /// A literal separator, `None` for `<_>`.
    Sep(Option<&'a str>),
    Token(ParsedToken),
}

fn parse(s: &str) -> Result<Template, TemplateParseError> {
    if s.len() > MAX_MINED_LINE_BYTES {
        return Err(TemplateParseError::TooLong { len: s.len() });
    }
    let err_template = || s.to_owned();
    let mut units: Vec<(usize, Unit<'_>)> = Vec::new();
    let mut i = 0;
    while i < s.len() {
        let rest = &s[i..];
        if rest.starts_with(SEPARATOR_WILDCARD) {
            units.push((i, Unit::Sep(None)));
            i += SEPARATOR_WILDCARD.len();
            continue;
        }
        let c = rest.chars().next().unwrap_or_default();
        if c.is_whitespace() {
            let end = rest
                .char_indices()
                .find(|(_, c)| !c.is_whitespace())
                .map_or(s.len(), |(j, _)| i + j);
            units.push((i, Unit::Sep(Some(&s[i..end]))));
            i = end;
            continue;
        }
        // A token: up to whitespace, `<_>` or the end. A `<*>` is a token of its own even with
        // text beside it: the miner's separators include `,` and `:`, which a rendering does not
        // mark, so `<*>,<*>` is two wildcards and a `,` (read here as a token between empty
        // separators, which reconstructs the same bytes).
        let mut start = i;
        let mut pieces: Vec<ParsedPiece> = Vec::new();
        let mut lit = String::new();
        while i < s.len() {
            let rest = &s[i..];
            let c = rest.chars().next().unwrap_or_default();
            if c.is_whitespace() || rest.starts_with(SEPARATOR_WILDCARD) {
                break;
            }
            if c == '\\' {
                let escaped = rest[1..].chars().next();
                match escaped {
                    Some(e) if !e.is_whitespace() => {
                        lit.push(e);
                        i += 1 + e.len_utf8();
                    }
                    _ => {
                        return Err(TemplateParseError::DanglingEscape {
                            offset: i,
                            template: err_template(),
                        });
                    }
                }
                continue;
            }
            if c == '<' {
                if rest.starts_with(TOKEN_WILDCARD) {
                    if let Some(slot) = token_slot(&mut pieces, &mut lit) {
                        units.push((start, Unit::Token(slot)));
                    }
                    units.push((i, Unit::Token(ParsedToken::Any)));
                    i += TOKEN_WILDCARD.len();
                    start = i;
                    continue;
                }
                let kind = rest[1..]
                    .find('>')
                    .and_then(|end| MaskKind::from_placeholder_name(&rest[1..1 + end]));
                let Some(kind) = kind else {
                    return Err(TemplateParseError::UnknownPlaceholder {
                        offset: i,
                        template: err_template(),
                    });
                };
                if !lit.is_empty() {
                    pieces.push(ParsedPiece::Lit(std::mem::take(&mut lit)));
                }
                pieces.push(ParsedPiece::Hole(kind));
                i += kind.placeholder().len();
                continue;
            }
            lit.push(c);
            i += c.len_utf8();
        }
        if let Some(slot) = token_slot(&mut pieces, &mut lit) {
            units.push((start, Unit::Token(slot)));
        }
    }

    // Assemble: sep? (token sep?)*, where a missing separator is the empty literal: at the
    // edges, and beside a `<*>` that shares its whitespace-delimited run with text.
    let mut b = Builder::with_capacity(0, s.len());
    let mut pending_sep: Option<Option<&str>> = None;
    for (offset, unit) in units {
        match unit {
            Unit::Sep(sep) => {
                if pending_sep.is_some() {
                    return Err(TemplateParseError::MixedSeparator {
                        offset,
                        template: err_template(),
                    });
                }
                pending_sep = Some(sep);
            }
            Unit::Token(tok) => {
                b.sep(pending_sep.take().unwrap_or(Some("")));
                b.parsed_token(&tok);
            }
        }
    }
    b.sep(pending_sep.unwrap_or(Some("")));
    Ok(b.finish())
}

/// Parses one token's rendering alone ([`Template::to_slots`]): escapes, typed holes and any
/// other character as literal text, spaces included.
fn parse_token(s: &str) -> Result<ParsedToken, String> {
    let mut pieces: Vec<ParsedPiece> = Vec::new();
    let mut lit = String::new();
    let mut chars = s.char_indices();
    while let Some((i, c)) = chars.next() {
        match c {
            '\\' => match chars.next() {
                Some((_, e)) => lit.push(e),
                None => return Err(format!("token {s:?} ends in an escape")),
            },
            '<' => {
                let kind = s[i + 1..]
                    .find('>')
                    .and_then(|end| MaskKind::from_placeholder_name(&s[i + 1..i + 1 + end]))
                    .ok_or_else(|| format!("token {s:?} has an unknown placeholder at byte {i}"))?;
                if !lit.is_empty() {
                    pieces.push(ParsedPiece::Lit(std::mem::take(&mut lit)));
                }
                pieces.push(ParsedPiece::Hole(kind));
                // The placeholder is ASCII: skip the rest of it.
                for _ in 1..kind.placeholder().len() {
                    chars.next();
                }
            }
            c => lit.push(c),
        }
    }
    token_slot(&mut pieces, &mut lit).ok_or_else(|| "an empty token".to_owned())
}

/// The token of the pieces and trailing literal read so far, emptying both; `None` when
/// nothing was read.
fn token_slot(pieces: &mut Vec<ParsedPiece>, lit: &mut String) -> Option<ParsedToken> {
    if pieces.is_empty() {
        (!lit.is_empty()).then(|| ParsedToken::Text(std::mem::take(lit)))
    } else {
        if !lit.is_empty() {
            pieces.push(ParsedPiece::Lit(std::mem::take(lit)));
        }
        Some(ParsedToken::Masked(std::mem::take(pieces)))
    }
}

/// Whether `a` and `b` are the same bytes, compared in line when they are short. A separator
/// is a byte or two, and a line has one per token: calling `memcmp` for each cost more than the
/// comparisons (16 % of the miner's time on the synthetic corpus, most of it the calls). Tokens
/// and their literal pieces are most often under 16 bytes too: from 4 bytes on, two loads of a
/// word from each side cover them, the first and the last word (overlapping when the length is
/// under twice the word's).
#[inline]
fn short_eq(a: &[u8], b: &[u8]) -> bool {
    let n = a.len();
    if n != b.len() {
        return false;
    }
    match n {
        0 => true,
        // The first, middle and last byte are every byte of one to three.
        1..=3 => a[0] == b[0] && a[n / 2] == b[n / 2] && a[n - 1] == b[n - 1],
        4..=7 => ends_eq::<4>(a, b),
        8..=16 => ends_eq::<8>(a, b),
        _ => a == b,
    }
}

/// Whether the first `N` bytes and the last `N` bytes of `a` and `b` agree: all of them, for two
/// slices of one length from `N` to `2 * N` (never called with less; it says `false` then).
#[inline]
fn ends_eq<const N: usize>(a: &[u8], b: &[u8]) -> bool {
    match (
        a.first_chunk::<N>(),
        b.first_chunk::<N>(),
        a.last_chunk::<N>(),
        b.last_chunk::<N>(),
    ) {
        (Some(a0), Some(b0), Some(a1), Some(b1)) => a0 == b0 && a1 == b1,
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tokens::Tokens;
    use proptest::prelude::*;

    const WORDS: [&str; 6] = ["a", "b", "ab", "10", "x1", "a=1"];

    fn line(words: &[usize]) -> String {
        words
            .iter()
            .map(|&w| WORDS[w])
            .collect::<Vec<_>>()
            .join(" ")
    }

    proptest! {
        /// Proves the comparison `best_match` uses is exact: for templates with literal, masked
        /// and wildcard slots, any line of their length and thresholds on and between the
        /// fractions a slot count makes, `similarity_reaching` (fingerprints first, then text)
        /// is `similarity` filtered by `reaches`, and the widening taken from that similarity
        /// (`widened_from`) is the one read from the text (`widened`). Unit tests keep two bits
        /// of each fingerprint, so unequal tokens of these words often share one.
        /// Mutation check (tried by hand): count equal fingerprints without comparing their text
        /// and proptest finds a collision counted as equal; have `every_literal_equal` say yes
        /// whatever was counted and the widenings differ. Skipping the fingerprint bound's
        /// early refusal survives: it is a shortcut, which the benchmark shows, not a behaviour.
        #[test]
        fn pruned_similarity_is_the_full_one_filtered_by_the_threshold(
            (a, b, c) in (1usize..24).prop_flat_map(|n| {
                let words = || proptest::collection::vec(0..WORDS.len(), n);
                (words(), words(), words())
            }),
            threshold in prop_oneof![
                Just(0.0), Just(0.25), Just(0.4), Just(0.5), Just(0.6), Just(2.0 / 3.0),
                Just(0.75), Just(1.0), 0.0..=1.0f64
            ],
        ) {
            let (la, lb, lc) = (line(&a), line(&b), line(&c));
            let (mut ta, mut tb, mut tc) = (Tokens::default(), Tokens::default(), Tokens::default());
            ta.fill(&la);
            tb.fill(&lb);
            tc.fill(&lc);
            let base = Template::from_line(&ta.view(&la));
            let template = base.widened(&tb.view(&lb)).unwrap_or(base);
            let view = tc.view(&lc);
            let full = template.similarity(&view);
            let reaching = template.similarity_reaching(&view, threshold);
            prop_assert_eq!(reaching, Some(full).filter(|s| s.reaches(threshold)));
            // And the widening `advance` derives from that similarity is the one from the text.
            if let Some(sim) = reaching {
                prop_assert_eq!(template.widened_from(&view, &sim), template.widened(&view));
            }
        }

        /// Proves a template's one buffer is laid out the same way however the template was
        /// made: widened from a line, read back from its slots or parsed from its rendering, a
        /// template has its text in slot order and nothing else, so the derived equality (which
        /// compares the buffer and the ranges into it) is equality of slots, and a widened
        /// template holds no text of the slots it gave up.
        /// Mutation check (by hand): keep the old text of a token widened to `<*>` in the buffer
        /// and the template read back from its slots differs.
        #[test]
        fn a_template_is_laid_out_the_same_however_it_was_made(
            (a, b) in (1usize..24).prop_flat_map(|n| {
                let words = || proptest::collection::vec(0..WORDS.len(), n);
                (words(), words())
            }),
        ) {
            let (la, lb) = (line(&a), line(&b));
            let (mut ta, mut tb) = (Tokens::default(), Tokens::default());
            ta.fill(&la);
            tb.fill(&lb);
            let base = Template::from_line(&ta.view(&la));
            let template = base.widened(&tb.view(&lb)).unwrap_or(base);
            prop_assert_eq!(&Template::from_slots(template.to_slots()).unwrap(), &template);
            // The buffer is the literal slots' text in order: the line with empty parameters.
            let literal = template.reconstruct(vec![""; template.param_count()]).unwrap();
            prop_assert_eq!(&*template.text, literal.as_str());
            let reparsed = Template::parse(&template.to_string()).unwrap();
            prop_assert_eq!(reparsed.to_string(), template.to_string());
        }
    }

    /// Proves `short_eq` is byte equality at every length it reads in words and past them: for
    /// each length to 40 bytes, a slice equals its copy and differs from the copy with any one
    /// byte changed (so each of its loads must see every byte) or with a byte more.
    /// Mutation check (by hand): compare the first byte of three twice instead of the middle
    /// one, or let the 8-byte words cover 17 bytes, and the byte left unread is found.
    #[test]
    fn short_eq_is_byte_equality() {
        for n in 0..=40u8 {
            let a: Vec<u8> = (0..n).map(|i| i.wrapping_mul(37)).collect();
            assert!(short_eq(&a, &a.clone()), "{n} bytes");
            for at in 0..a.len() {
                let mut b = a.clone();
                b[at] ^= 0x80;
                assert!(!short_eq(&a, &b), "{n} bytes, byte {at} changed");
            }
            let mut longer = a.clone();
            longer.push(0);
            assert!(!short_eq(&a, &longer), "{n} bytes and one more");
        }
    }
}
