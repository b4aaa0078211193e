/*
 * The interposer's per-thread re-entrancy depth.
 *
 * Non-zero means "this thread is inside tiermem or mimalloc, or is one of
 * tiermem's own threads": its allocations come from glibc, never from tiered
 * memory, and its new mappings are not tiered. initial-exec TLS: reading it
 * never calls __tls_get_addr (which may call malloc).
 */
static __thread unsigned tm_depth __attribute__((tls_model("initial-exec")));

unsigned tm_guard_depth(void) { return tm_depth; }
void tm_guard_set_depth(unsigned depth) { tm_depth = depth; }
