package ledger

// FreeSpace is the free space, in bytes, of the file system holding dir: the
// figure Open and writes compare with the floor (DefaultMinFreeSpace).
// Operators' checks (gpumesh doctor) read it from here so the two agree.
func FreeSpace(dir string) (uint64, error) { return freeSpace(dir) }
