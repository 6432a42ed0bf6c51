// Package exepages gives back the running binary's resident pages that an
// idle process no longer uses, without reading anything from disk.
//
// A Go binary's code and read-only data are mapped from its file. Starting
// touches much of them (the init of every linked package, parsing the
// configuration, the first registrations), and the kernel maps file pages
// in whole folios and fault-around windows, so after its start mariposa had
// 18 of the 22 MB it maps resident, counted in its RSS and, while it is
// the only process mapping its binary, in its USS. An idle supervisor uses
// a fraction of that.
//
// Drop unmaps those pages (madvise MADV_DONTNEED) once the node has
// settled. It is safe for the mappings it touches, and only those:
//
//	read-only mapping of the binary, no anonymous page in it
//	      |  every resident page is the file's page-cache page
//	      v
//	MADV_DONTNEED: the page-table entries go, the page cache keeps the pages
//	      |
//	      v
//	next touch: a minor fault maps the same page-cache page again
//	(the same bytes; a disk read only if memory pressure evicted it,
//	as it could have while mapped)
//
// A writable mapping (the binary's data) is never touched: its written
// pages are private copies, and dropping them would put the file's bytes
// back. Nor is a read-only mapping holding an anonymous page (a relocated
// page of a position-independent build, written by the loader before it
// was made read-only): dropping it would undo the relocation.
package exepages
