module tiermem.test/go_maps

go 1.19
