module tiermem.test/go_heap

go 1.19
