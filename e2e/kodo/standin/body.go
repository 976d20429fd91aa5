package main

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"strconv"
	"strings"
)

// headerLen is the fixed-size prefix of every body: "kodo-standin <id, 20 digits>\n".
const headerLen = 13 + 20 + 1

// makeBody returns a size-byte body for id: the header, then filler derived from id (so two
// bodies never hash alike), and its hex sha256.
func makeBody(id uint64, size int) ([]byte, string, error) {
	if size < headerLen {
		return nil, "", fmt.Errorf("-size %d is below the %d-byte id header", size, headerLen)
	}
	b := make([]byte, size)
	copy(b, fmt.Sprintf("kodo-standin %020d\n", id))
	// A 64 KiB block of xorshift output seeded by id, repeated with the offset mixed in.
	block := make([]byte, 64*1024)
	x := id*0x9E3779B97F4A7C15 + 1
	for i := 0; i+8 <= len(block); i += 8 {
		x ^= x << 13
		x ^= x >> 7
		x ^= x << 17
		binary.LittleEndian.PutUint64(block[i:], x)
	}
	for off := headerLen; off < size; off += len(block) {
		n := copy(b[off:], block)
		if off+8 <= size && n >= 8 {
			binary.LittleEndian.PutUint64(b[off:], uint64(off)^id)
		}
	}
	sum := sha256.Sum256(b)
	return b, hex.EncodeToString(sum[:]), nil
}

// bodyID reads the id from a body's header.
func bodyID(b []byte) (uint64, bool) {
	if len(b) < headerLen || !strings.HasPrefix(string(b[:13]), "kodo-standin ") || b[headerLen-1] != '\n' {
		return 0, false
	}
	id, err := strconv.ParseUint(string(b[13:headerLen-1]), 10, 64)
	return id, err == nil
}
