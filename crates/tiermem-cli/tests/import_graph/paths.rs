//! The `crate::…` and `super::…` paths in a file's code, `use` trees
//! (`use crate::{a::B, c::{self, D}}`) expanded into one path per leaf,
//! each with the line it is on and the inline module (`mod NAME { … }`)
//! it is written in.

use super::code::is_ident_char;

/// One path as written: `segments` starts with `crate` or with one or more
/// `super`; `inline` is the stack of inline modules around it.
pub struct WrittenPath {
    pub segments: Vec<String>,
    pub inline: Vec<String>,
    pub line: usize,
}

/// Every path of `code` that starts with `crate::` or `super::`.
pub fn paths_in(code: &[char]) -> Vec<WrittenPath> {
    let mut scanner = Scanner {
        code,
        at: 0,
        line: 1,
    };
    let mut found = Vec::new();
    let mut inline: Vec<(String, usize)> = Vec::new();
    let mut depth = 0usize;
    while scanner.at < code.len() {
        let c = code[scanner.at];
        if c == '{' {
            depth += 1;
        } else if c == '}' {
            depth = depth.saturating_sub(1);
            while inline.last().is_some_and(|(_, d)| *d > depth) {
                inline.pop();
            }
        }
        if !is_ident_char(c) || (scanner.at > 0 && is_ident_char(code[scanner.at - 1])) {
            scanner.advance();
            continue;
        }
        let word = scanner.ident();
        if word == "mod" {
            if let Some(name) = scanner.inline_module_name() {
                inline.push((name, depth + 1));
            }
            continue;
        }
        if (word == "crate" || word == "super") && scanner.peek_path_separator() {
            let stack: Vec<String> = inline.iter().map(|(n, _)| n.clone()).collect();
            for (segments, line) in scanner.path_tail(vec![word]) {
                found.push(WrittenPath {
                    segments,
                    inline: stack.clone(),
                    line,
                });
            }
        }
    }
    found
}

struct Scanner<'a> {
    code: &'a [char],
    at: usize,
    line: usize,
}

impl Scanner<'_> {
    fn advance(&mut self) {
        if self.code[self.at] == '\n' {
            self.line += 1;
        }
        self.at += 1;
    }

    fn skip_space(&mut self) {
        while self.at < self.code.len() && self.code[self.at].is_whitespace() {
            self.advance();
        }
    }

    fn peek(&self) -> Option<char> {
        self.code.get(self.at).copied()
    }

    fn ident(&mut self) -> String {
        let mut word = String::new();
        while let Some(c) = self.peek().filter(|c| is_ident_char(*c)) {
            word.push(c);
            self.advance();
        }
        word
    }

    /// Whether `::` comes next, after any space (consumed).
    fn peek_path_separator(&mut self) -> bool {
        self.skip_space();
        self.code.get(self.at) == Some(&':') && self.code.get(self.at + 1) == Some(&':')
    }

    /// After `mod`: the module's name if its body follows (`mod NAME {`).
    fn inline_module_name(&mut self) -> Option<String> {
        self.skip_space();
        let name = self.ident();
        self.skip_space();
        (!name.is_empty() && self.peek() == Some('{')).then_some(name)
    }

    /// The rest of a path after `prefix`: one entry per leaf, with the
    /// line its last segment is on.
    fn path_tail(&mut self, mut prefix: Vec<String>) -> Vec<(Vec<String>, usize)> {
        let mut line = self.line;
        while self.peek_path_separator() {
            self.at += 2;
            self.skip_space();
            match self.peek() {
                Some('{') => {
                    self.advance();
                    return self.group(prefix);
                }
                Some(c) if is_ident_char(c) => {
                    line = self.line;
                    prefix.push(self.ident());
                }
                // A glob (`::*`) or turbofish (`::<T>`): the path so far.
                _ => break,
            }
        }
        vec![(prefix, line)]
    }

    /// The leaves of a `use` group `{a::B, c::{self, D}, E as F}`, after
    /// its opening brace.
    fn group(&mut self, prefix: Vec<String>) -> Vec<(Vec<String>, usize)> {
        let mut leaves = Vec::new();
        loop {
            self.skip_space();
            match self.peek() {
                None => return leaves,
                Some('}') => {
                    self.advance();
                    return leaves;
                }
                Some('{') => {
                    self.advance();
                    leaves.extend(self.group(prefix.clone()));
                }
                Some(c) if is_ident_char(c) => {
                    let line = self.line;
                    let first = self.ident();
                    if first == "self" {
                        leaves.push((prefix.clone(), line));
                    } else {
                        let mut path = prefix.clone();
                        path.push(first);
                        leaves.extend(self.path_tail(path));
                    }
                    self.skip_to_group_separator();
                }
                Some(_) => self.advance(),
            }
        }
    }

    /// Past the rest of a group entry (`as NAME`): to its `,` or the `}`
    /// that closes the group.
    fn skip_to_group_separator(&mut self) {
        while let Some(c) = self.peek() {
            match c {
                '}' => return,
                ',' => {
                    self.advance();
                    return;
                }
                _ => self.advance(),
            }
        }
    }
}
