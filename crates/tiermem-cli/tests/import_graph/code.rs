//! The code of a Rust source file with everything that is not code blanked
//! out: comments (doc comments too), the contents of string and character
//! literals, and `#[cfg(test)]` items. Blanking keeps every newline, so a
//! position in the result is on the same line as in the source.

/// A source file's code, and the modules its `#[cfg(test)] mod NAME;`
/// declarations load from files of their own (test code, left out too).
pub struct Code {
    pub text: Vec<char>,
    pub test_modules: Vec<String>,
}

/// Blanks out the comments, literals and test-only items of `source`.
pub fn code_of(source: &str) -> Code {
    let mut text = without_comments_and_literals(source);
    let test_modules = blank_test_items(&mut text);
    Code { text, test_modules }
}

pub fn is_ident_char(c: char) -> bool {
    c.is_alphanumeric() || c == '_'
}

/// Replaces `text[from..to]` with spaces, newlines kept.
fn blank(text: &mut [char], from: usize, to: usize) {
    for c in &mut text[from..to] {
        if *c != '\n' {
            *c = ' ';
        }
    }
}

fn without_comments_and_literals(source: &str) -> Vec<char> {
    let mut text: Vec<char> = source.chars().collect();
    let mut i = 0;
    while i < text.len() {
        let end = match text[i] {
            '/' if text.get(i + 1) == Some(&'/') => line_comment_end(&text, i),
            '/' if text.get(i + 1) == Some(&'*') => block_comment_end(&text, i),
            '"' => string_end(&text, i),
            'r' if starts_raw_string(&text, i) => raw_string_end(&text, i),
            'b' if text.get(i + 1) == Some(&'r') && starts_raw_string(&text, i + 1) => {
                raw_string_end(&text, i + 1)
            }
            '\'' => match char_literal_end(&text, i) {
                Some(end) => end,
                None => i + 1,
            },
            c if is_ident_char(c) => {
                // The rest of an identifier, so that the `r` of `bar"` is
                // not taken for a raw string.
                let mut j = i;
                while j < text.len() && is_ident_char(text[j]) {
                    j += 1;
                }
                i = j;
                continue;
            }
            _ => {
                i += 1;
                continue;
            }
        };
        blank(&mut text, i, end);
        i = end;
    }
    text
}

fn line_comment_end(text: &[char], from: usize) -> usize {
    (from..text.len())
        .find(|&j| text[j] == '\n')
        .unwrap_or(text.len())
}

/// Block comments nest.
fn block_comment_end(text: &[char], from: usize) -> usize {
    let mut depth = 0;
    let mut j = from;
    while j + 1 < text.len() {
        match (text[j], text[j + 1]) {
            ('/', '*') => {
                depth += 1;
                j += 2;
            }
            ('*', '/') => {
                depth -= 1;
                j += 2;
                if depth == 0 {
                    return j;
                }
            }
            _ => j += 1,
        }
    }
    text.len()
}

fn string_end(text: &[char], from: usize) -> usize {
    let mut j = from + 1;
    while j < text.len() {
        match text[j] {
            '\\' => j += 2,
            '"' => return j + 1,
            _ => j += 1,
        }
    }
    text.len()
}

/// `r"`, `r#"`, `br#"` at the start of an identifier-like run.
fn starts_raw_string(text: &[char], at: usize) -> bool {
    let mut j = at + 1;
    while text.get(j) == Some(&'#') {
        j += 1;
    }
    text.get(j) == Some(&'"')
}

fn raw_string_end(text: &[char], from: usize) -> usize {
    let mut j = from + 1;
    let mut hashes = 0;
    while text[j] == '#' {
        hashes += 1;
        j += 1;
    }
    j += 1;
    while j < text.len() {
        if text[j] == '"' && (1..=hashes).all(|h| text.get(j + h) == Some(&'#')) {
            return j + 1 + hashes;
        }
        j += 1;
    }
    text.len()
}

/// A character literal (`'x'`, `'\n'`, `'\u{1F600}'`) starting at `from`,
/// or `None` for a lifetime or a label (`'a`, `'outer:`).
fn char_literal_end(text: &[char], from: usize) -> Option<usize> {
    match text.get(from + 1)? {
        '\\' => (from + 3..text.len())
            .find(|&j| text[j] == '\'')
            .map(|j| j + 1),
        _ if text.get(from + 2) == Some(&'\'') => Some(from + 3),
        _ => None,
    }
}

/// Blanks every item that follows `#[cfg(test)]` and returns the names of
/// the test modules that live in files of their own.
fn blank_test_items(text: &mut [char]) -> Vec<String> {
    let marker: Vec<char> = "#[cfg(test)]".chars().collect();
    let mut test_modules = Vec::new();
    let mut i = 0;
    while i + marker.len() <= text.len() {
        if text[i..i + marker.len()] != marker[..] {
            i += 1;
            continue;
        }
        let end = item_end(text, i + marker.len());
        let item: String = text[i + marker.len()..end].iter().collect();
        if let Some(name) = file_module_name(&item) {
            test_modules.push(name);
        }
        blank(text, i, end);
        i = end;
    }
    test_modules
}

/// Where the item that starts at `from` (after any further attributes)
/// ends: at its `;`, or at the `}` that closes its body.
fn item_end(text: &[char], from: usize) -> usize {
    let mut depth = 0usize;
    let mut j = from;
    while j < text.len() {
        match text[j] {
            '{' | '[' | '(' => depth += 1,
            '}' | ']' | ')' => {
                depth = depth.saturating_sub(1);
                if depth == 0 && text[j] == '}' {
                    return j + 1;
                }
            }
            ';' if depth == 0 => return j + 1,
            _ => {}
        }
        j += 1;
    }
    text.len()
}

/// `NAME` for an item `mod NAME;` (with any attributes and visibility).
fn file_module_name(item: &str) -> Option<String> {
    let words: Vec<&str> = item
        .split(|c: char| !is_ident_char(c) && c != ';')
        .filter(|w| !w.is_empty())
        .collect();
    let at = words.iter().position(|w| *w == "mod")?;
    let name = words.get(at + 1)?.strip_suffix(';')?;
    Some(name.to_string())
}
