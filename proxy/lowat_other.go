//go:build !linux

package proxy

const lowatSupported = false

func setRcvLowat(uintptr, int) error { return nil }
