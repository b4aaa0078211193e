//! The mount table's path escaping.

/// Undoes the `\ooo` escaping of paths in /proc/swaps and
/// /proc/self/mounts (space, tab, newline and backslash come as three
/// octal digits after a backslash).
pub fn unescape_octal(s: &str) -> std::ffi::OsString {
    use std::os::unix::ffi::OsStringExt;
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let digits = bytes
            .get(i + 1..i + 4)
            .filter(|d| d.iter().all(|b| (b'0'..=b'7').contains(b)));
        let value = digits.and_then(|d| {
            let v = d.iter().fold(0u32, |acc, b| acc * 8 + u32::from(b - b'0'));
            u8::try_from(v).ok()
        });
        match (bytes[i], value) {
            (b'\\', Some(byte)) => {
                out.push(byte);
                i += 4;
            }
            (b, _) => {
                out.push(b);
                i += 1;
            }
        }
    }
    std::ffi::OsString::from_vec(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escapes_become_bytes_and_the_rest_stays() {
        assert_eq!(unescape_octal("/a\\040b\\011c"), "/a b\tc");
        assert_eq!(unescape_octal("/plain\\"), "/plain\\");
        assert_eq!(
            unescape_octal("/x\\777"),
            "/x\\777",
            "out of a byte's range"
        );
    }
}
