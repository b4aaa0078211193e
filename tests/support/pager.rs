//! A Python program that pages: it fills 64 MiB with random bytes (four
//! times the 16 MiB budgets the tests give), takes a SHA-256 of every byte,
//! optionally creates the file named by its first argument (a fault
//! trigger), reads every byte again and prints `same` or `DIFFERENT`.
//! Real programs' data is checked whole, not by a stamp per page.

pub const PAGER: &str = "import hashlib, os, sys\n\
b = bytearray(os.urandom(64 << 20))\n\
want = hashlib.sha256(b).digest()\n\
print('filled', flush=True)\n\
if len(sys.argv) > 1: open(sys.argv[1], 'w').close()\n\
print('same' if hashlib.sha256(b).digest() == want else 'DIFFERENT', flush=True)";
