// Go maps, strings and sorting on four goroutines, paged by `tiermem run`:
// each goroutine builds maps of byte slices, sorts their keys and hashes
// every key and value. The program prints one digest per goroutine, which
// the test compares with an untiered run of the same program: a single
// wrong byte anywhere changes a digest. The cgo import makes Go's runtime
// map its heap through the C library, which tiermem interposes.
//
// Usage: go_maps ENTRIES ROUNDS
package main

// #include <stdlib.h>
import "C"

import (
	"crypto/sha256"
	"fmt"
	"os"
	"sort"
	"strconv"
	"sync"
)

var _ = C.free

// work builds `rounds` maps of `entries` values each and hashes them in
// key order.
func work(id, entries, rounds int) []byte {
	h := sha256.New()
	for r := 0; r < rounds; r++ {
		m := make(map[string][]byte)
		for i := 0; i < entries; i++ {
			k := "k" + strconv.Itoa(id) + "-" + strconv.Itoa(r) + "-" + strconv.Itoa(i)
			v := make([]byte, 200+i%300)
			for j := range v {
				v[j] = byte(i*31 + j + r)
			}
			m[k] = v
		}
		keys := make([]string, 0, len(m))
		for k := range m {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			h.Write([]byte(k))
			h.Write(m[k])
		}
	}
	return h.Sum(nil)
}

func main() {
	if len(os.Args) != 3 {
		fmt.Fprintln(os.Stderr, "usage: go_maps ENTRIES ROUNDS")
		os.Exit(2)
	}
	entries, err1 := strconv.Atoi(os.Args[1])
	rounds, err2 := strconv.Atoi(os.Args[2])
	if err1 != nil || err2 != nil || entries < 1 || rounds < 1 {
		fmt.Fprintln(os.Stderr, "go_maps: ENTRIES and ROUNDS must be positive integers")
		os.Exit(2)
	}
	var wg sync.WaitGroup
	sums := make([][]byte, 4)
	for g := range sums {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			sums[g] = work(g, entries, rounds)
		}(g)
	}
	wg.Wait()
	for g, s := range sums {
		fmt.Printf("goroutine %d: %x\n", g, s)
	}
}
