//go:build !amd64

package main

func archProbes(func(nr uintptr, a ...uintptr) error) []struct {
	name string
	call func() error
} {
	return nil
}
