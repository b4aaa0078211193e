// A Go heap paged by `tiermem run`: three rounds of 256 MiB of live
// slices, checked word by word, then dropped and returned to the system
// with debug.FreeOSMemory, which Go's runtime does with its own madvise
// system calls, unseen by tiermem. Every fresh slice must read zeros
// before it is filled: Go's runtime skips clearing memory it returned
// to the system, counting on the kernel's zeros. The cgo import makes the runtime map
// its heap through the C library, which tiermem interposes; Go programs
// end with a direct exit_group, so tiermem run reports their statistics
// from the last ones it took. Prints "OK ..." and exits 0, or "FAIL ..."
// and exits 1.
package main

// #include <stdlib.h>
import "C"

import (
	"fmt"
	"os"
	"runtime/debug"
)

var _ = C.free

// fill returns n fresh slices of 1 MiB, each filled with its pattern,
// and how many of their words were not zero before the filling.
func fill(n int, seed uint64) ([][]uint64, int) {
	d := make([][]uint64, n)
	dirty := 0
	for b := range d {
		d[b] = make([]uint64, 131072)
		for _, w := range d[b] {
			if w != 0 {
				dirty++
			}
		}
		for i := range d[b] {
			d[b][i] = uint64(b)*1000003 + uint64(i)*7 + seed
		}
	}
	return d, dirty
}

func check(d [][]uint64, seed uint64) int {
	bad := 0
	for b := range d {
		for i, w := range d[b] {
			if w != uint64(b)*1000003+uint64(i)*7+seed {
				bad++
			}
		}
	}
	return bad
}

func main() {
	bad, dirty := 0, 0
	for round := uint64(0); round < 3; round++ {
		d, fresh := fill(256, round)
		dirty += fresh
		bad += check(d, round)
		d = nil
		debug.FreeOSMemory()
	}
	if bad != 0 || dirty != 0 {
		fmt.Println("FAIL:", bad, "wrong words,", dirty, "words of fresh slices not zero")
		os.Exit(1)
	}
	fmt.Println("OK: 3 rounds of 256 MiB, every word right")
}
