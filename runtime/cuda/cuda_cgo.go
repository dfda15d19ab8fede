//go:build cgo && linux

package cuda

/*
#cgo LDFLAGS: -ldl
#include <dlfcn.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

typedef int CUresult;
typedef int CUdevice;
typedef void *CUcontext;
typedef void *CUmodule;
typedef void *CUfunction;
typedef unsigned long long CUdeviceptr;
typedef struct { char bytes[16]; } CUuuid;

static void *gp_lib;
static CUresult (*p_cuInit)(unsigned int);
static CUresult (*p_cuDeviceGetCount)(int *);
static CUresult (*p_cuDeviceGet)(CUdevice *, int);
static CUresult (*p_cuDeviceGetName)(char *, int, CUdevice);
static CUresult (*p_cuDeviceGetUuid)(CUuuid *, CUdevice);
static CUresult (*p_cuDeviceTotalMem)(size_t *, CUdevice);
static CUresult (*p_cuDevicePrimaryCtxRetain)(CUcontext *, CUdevice);
static CUresult (*p_cuDevicePrimaryCtxRelease)(CUdevice);
static CUresult (*p_cuCtxSetCurrent)(CUcontext);
static CUresult (*p_cuCtxSynchronize)(void);
static CUresult (*p_cuModuleLoadDataEx)(CUmodule *, const void *, unsigned int, int *, void **);
static CUresult (*p_cuModuleUnload)(CUmodule);
static CUresult (*p_cuModuleGetFunction)(CUfunction *, CUmodule, const char *);
static CUresult (*p_cuMemAlloc)(CUdeviceptr *, size_t);
static CUresult (*p_cuMemFree)(CUdeviceptr);
static CUresult (*p_cuMemcpyDtoH)(void *, CUdeviceptr, size_t);
static CUresult (*p_cuLaunchKernel)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                                    unsigned, void *, void **, void **);
static CUresult (*p_cuGetErrorString)(CUresult, const char **);
static CUresult (*p_cuMemGetInfo)(size_t *, size_t *);
static CUresult (*p_cuMemsetD8)(CUdeviceptr, unsigned char, size_t);

// gp_load opens the driver and resolves the entry points; it returns NULL
// or the name of what is missing.
static const char *gp_load(void) {
	if (gp_lib) return NULL;
	void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
	if (!h) h = dlopen("libcuda.so", RTLD_NOW | RTLD_LOCAL);
	if (!h) return "libcuda.so.1";
#define SYM(var, name) if (!(*(void **)(&var) = dlsym(h, name))) { dlclose(h); return name; }
	SYM(p_cuInit, "cuInit");
	SYM(p_cuDeviceGetCount, "cuDeviceGetCount");
	SYM(p_cuDeviceGet, "cuDeviceGet");
	SYM(p_cuDeviceGetName, "cuDeviceGetName");
	SYM(p_cuDeviceGetUuid, "cuDeviceGetUuid");
	SYM(p_cuDeviceTotalMem, "cuDeviceTotalMem_v2");
	SYM(p_cuDevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain");
	SYM(p_cuDevicePrimaryCtxRelease, "cuDevicePrimaryCtxRelease_v2");
	SYM(p_cuCtxSetCurrent, "cuCtxSetCurrent");
	SYM(p_cuCtxSynchronize, "cuCtxSynchronize");
	SYM(p_cuModuleLoadDataEx, "cuModuleLoadDataEx");
	SYM(p_cuModuleUnload, "cuModuleUnload");
	SYM(p_cuModuleGetFunction, "cuModuleGetFunction");
	SYM(p_cuMemAlloc, "cuMemAlloc_v2");
	SYM(p_cuMemFree, "cuMemFree_v2");
	SYM(p_cuMemcpyDtoH, "cuMemcpyDtoH_v2");
	SYM(p_cuLaunchKernel, "cuLaunchKernel");
	SYM(p_cuGetErrorString, "cuGetErrorString");
	SYM(p_cuMemGetInfo, "cuMemGetInfo_v2");
	SYM(p_cuMemsetD8, "cuMemsetD8_v2");
#undef SYM
	gp_lib = h;
	return NULL;
}

static const char *gp_errstr(CUresult r) {
	const char *s = NULL;
	if (p_cuGetErrorString && p_cuGetErrorString(r, &s) == 0 && s) return s;
	return "unknown CUDA error";
}

static CUresult gp_init(void) { return p_cuInit(0); }
static CUresult gp_count(int *n) { return p_cuDeviceGetCount(n); }
static CUresult gp_device(int ord, CUdevice *d) { return p_cuDeviceGet(d, ord); }
static CUresult gp_name(CUdevice d, char *buf, int len) { return p_cuDeviceGetName(buf, len, d); }
static CUresult gp_uuid(CUdevice d, unsigned char *out) {
	CUuuid u;
	CUresult r = p_cuDeviceGetUuid(&u, d);
	if (r == 0) memcpy(out, u.bytes, 16);
	return r;
}
static CUresult gp_mem(CUdevice d, size_t *b) { return p_cuDeviceTotalMem(b, d); }
static CUresult gp_retain(CUdevice d, CUcontext *c) { return p_cuDevicePrimaryCtxRetain(c, d); }
static CUresult gp_release(CUdevice d) { return p_cuDevicePrimaryCtxRelease(d); }
static CUresult gp_set(CUcontext c) { return p_cuCtxSetCurrent(c); }
static CUresult gp_sync(void) { return p_cuCtxSynchronize(); }
static CUresult gp_module(CUmodule *m, const char *ptx, char *log, unsigned loglen) {
	// JIT options: error log buffer and its size.
	int opts[2] = {5, 6}; // CU_JIT_ERROR_LOG_BUFFER, CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES
	void *vals[2] = {log, (void *)(uintptr_t)loglen};
	return p_cuModuleLoadDataEx(m, ptx, 2, opts, vals);
}
static CUresult gp_unload(CUmodule m) { return p_cuModuleUnload(m); }
static CUresult gp_func(CUmodule m, const char *name, CUfunction *f) { return p_cuModuleGetFunction(f, m, name); }
static CUresult gp_alloc(CUdeviceptr *p, size_t n) { return p_cuMemAlloc(p, n); }
static CUresult gp_free(CUdeviceptr p) { return p_cuMemFree(p); }
static CUresult gp_dtoh(void *dst, CUdeviceptr src, size_t n) { return p_cuMemcpyDtoH(dst, src, n); }
static CUresult gp_meminfo(size_t *free_b, size_t *total_b) { return p_cuMemGetInfo(free_b, total_b); }
static CUresult gp_memset0(CUdeviceptr p, size_t n) { return p_cuMemsetD8(p, 0, n); }
static CUresult gp_launch_gen(CUfunction f, CUdeviceptr out, uint64_t key, uint32_t which, uint32_t count) {
	void *args[] = {&out, &key, &which, &count};
	unsigned blocks = (count + 255) / 256;
	return p_cuLaunchKernel(f, blocks, 1, 1, 256, 1, 1, 0, NULL, args, NULL);
}
static CUresult gp_launch_matmul(CUfunction f, CUdeviceptr a, CUdeviceptr b, CUdeviceptr c, uint32_t n) {
	void *args[] = {&a, &b, &c, &n};
	return p_cuLaunchKernel(f, n / 128, n / 128, 1, 256, 1, 1, 0, NULL, args, NULL);
}
*/
import "C"

import (
	"fmt"
	goruntime "runtime"
	"sync"
	"time"
	"unsafe"
)

var (
	loadOnce sync.Once
	loadErr  error
)

// Load opens the CUDA driver once; its error wraps ErrUnavailable.
func Load() error {
	loadOnce.Do(func() {
		if missing := C.gp_load(); missing != nil {
			loadErr = fmt.Errorf("%w: cannot load %s", ErrUnavailable, C.GoString(missing))
			return
		}
		if r := C.gp_init(); r != 0 {
			loadErr = fmt.Errorf("%w: cuInit: %s", ErrUnavailable, errString(r))
		}
	})
	return loadErr
}

func errString(r C.CUresult) string {
	return fmt.Sprintf("%s (%d)", C.GoString(C.gp_errstr(r)), int(r))
}

func check(what string, r C.CUresult) error {
	if r != 0 {
		return fmt.Errorf("cuda: %s: %s", what, errString(r))
	}
	return nil
}

// Devices lists the driver's devices.
func Devices() ([]Device, error) {
	if err := Load(); err != nil {
		return nil, err
	}
	var n C.int
	if err := check("device count", C.gp_count(&n)); err != nil {
		return nil, err
	}
	out := make([]Device, 0, int(n))
	for i := 0; i < int(n); i++ {
		var d C.CUdevice
		if err := check("device", C.gp_device(C.int(i), &d)); err != nil {
			return nil, err
		}
		var name [256]C.char
		if err := check("device name", C.gp_name(d, &name[0], 256)); err != nil {
			return nil, err
		}
		var u [16]C.uchar
		if err := check("device uuid", C.gp_uuid(d, &u[0])); err != nil {
			return nil, err
		}
		var mem C.size_t
		if err := check("device memory", C.gp_mem(d, &mem)); err != nil {
			return nil, err
		}
		b := C.GoBytes(unsafe.Pointer(&u[0]), 16)
		out = append(out, Device{Ordinal: i, Name: C.GoString(&name[0]), MemBytes: uint64(mem),
			UUID: fmt.Sprintf("GPU-%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])})
	}
	return out, nil
}

// find is the driver's device uuid ("" for its first device).
func find(uuid string) (Device, error) {
	devs, err := Devices()
	if err != nil {
		return Device{}, err
	}
	for _, d := range devs {
		if d.UUID == uuid || uuid == "" {
			return d, nil
		}
	}
	return Device{}, fmt.Errorf("cuda: no device %s among the driver's %d", uuid, len(devs))
}

// Session holds one device's context, the challenge kernels and the
// buffers for n×n matrices, ready to run a challenge: everything that does
// not depend on the challenge's seed, so that the timed part is the work.
// A Session is used by one goroutine at a time.
type Session struct {
	Device Device
	n      int
	dev    C.CUdevice
	ctx    C.CUcontext
	mod    C.CUmodule
	gen    C.CUfunction
	mul    C.CUfunction
	buf    [4]C.CUdeviceptr // A, B, and two products
}

// Open prepares device uuid ("" or an ordinal's UUID) for n×n challenges.
// n must be a positive multiple of 128.
func Open(uuid string, n int) (*Session, error) {
	if n <= 0 || n%128 != 0 || n > 1<<15 {
		return nil, fmt.Errorf("cuda: matrix size %d is not a positive multiple of 128 up to 32768", n)
	}
	d, err := find(uuid)
	if err != nil {
		return nil, err
	}
	s := &Session{n: n, Device: d}
	goruntime.LockOSThread()
	defer goruntime.UnlockOSThread()
	// C writes into locals: pointers into s (which holds Go strings) may
	// not be passed to C.
	var dev C.CUdevice
	if err := check("device", C.gp_device(C.int(s.Device.Ordinal), &dev)); err != nil {
		return nil, err
	}
	s.dev = dev
	var ctx C.CUcontext
	if err := check("primary context", C.gp_retain(s.dev, &ctx)); err != nil {
		return nil, err
	}
	s.ctx = ctx
	ok := false
	defer func() {
		if !ok {
			s.closeLocked()
		}
	}()
	if err := check("set context", C.gp_set(s.ctx)); err != nil {
		return nil, err
	}
	ptx := C.CString(kernelsPTX)
	defer C.free(unsafe.Pointer(ptx))
	var log [4096]C.char
	var mod C.CUmodule
	if r := C.gp_module(&mod, ptx, &log[0], 4096); r != 0 {
		return nil, fmt.Errorf("cuda: load kernels: %s: %s", errString(r), C.GoString(&log[0]))
	}
	s.mod = mod
	for name, dst := range map[string]*C.CUfunction{"gp_gen": &s.gen, "gp_matmul": &s.mul} {
		cn := C.CString(name)
		var f C.CUfunction
		r := C.gp_func(s.mod, cn, &f)
		C.free(unsafe.Pointer(cn))
		if err := check("kernel "+name, r); err != nil {
			return nil, err
		}
		*dst = f
	}
	size := C.size_t(n) * C.size_t(n) * 4
	for i := range s.buf {
		var p C.CUdeviceptr
		if err := check("allocate", C.gp_alloc(&p, size)); err != nil {
			return nil, err
		}
		s.buf[i] = p
	}
	ok = true
	return s, nil
}

// MatPow computes C = A·B^k modulo 2^32 of the matrices seeded by key
// (A is matrix 0, B matrix 1, as gpuproof.Elem defines them) and returns C
// row-major, and how long the device work took (generation, the k
// products and the copy back).
func (s *Session) MatPow(key uint64, k int) ([]uint32, time.Duration, error) {
	if k < 1 {
		return nil, 0, fmt.Errorf("cuda: power %d < 1", k)
	}
	goruntime.LockOSThread()
	defer goruntime.UnlockOSThread()
	if err := check("set context", C.gp_set(s.ctx)); err != nil {
		return nil, 0, err
	}
	start := time.Now()
	count := C.uint32_t(s.n * s.n)
	for which := 0; which < 2; which++ {
		if err := check("generate", C.gp_launch_gen(s.gen, s.buf[which], C.uint64_t(key), C.uint32_t(which), count)); err != nil {
			return nil, 0, err
		}
	}
	src, dst := s.buf[0], s.buf[2]
	for i := 0; i < k; i++ {
		if err := check("multiply", C.gp_launch_matmul(s.mul, src, s.buf[1], dst, C.uint32_t(s.n))); err != nil {
			return nil, 0, err
		}
		if i == 0 {
			src, dst = s.buf[2], s.buf[3]
		} else {
			src, dst = dst, src
		}
	}
	if err := check("synchronise", C.gp_sync()); err != nil {
		return nil, 0, err
	}
	out := make([]uint32, s.n*s.n)
	if err := check("copy back", C.gp_dtoh(unsafe.Pointer(&out[0]), src, C.size_t(len(out))*4)); err != nil {
		return nil, 0, err
	}
	return out, time.Since(start), nil
}

// Close frees the buffers and releases the device's context.
func (s *Session) Close() {
	goruntime.LockOSThread()
	defer goruntime.UnlockOSThread()
	s.closeLocked()
}

func (s *Session) closeLocked() {
	if s.ctx == nil {
		return
	}
	C.gp_set(s.ctx)
	for i, b := range s.buf {
		if b != 0 {
			C.gp_free(b)
			s.buf[i] = 0
		}
	}
	if s.mod != nil {
		C.gp_unload(s.mod)
		s.mod = nil
	}
	C.gp_release(s.dev)
	s.ctx = nil
}

// scrubChunk is the allocation size Scrub zeroes device memory in.
const scrubChunk = 256 << 20

// Scrub zeroes the free memory of device uuid: it allocates every free
// chunk it can (what the last lease used is free once its processes are
// gone), writes zeros over each and frees them. It returns the bytes
// zeroed and the device's total memory.
func Scrub(uuid string) (zeroed, total uint64, err error) {
	if uuid == "" {
		return 0, 0, fmt.Errorf("cuda: scrub needs a device UUID")
	}
	d, err := find(uuid)
	if err != nil {
		return 0, 0, err
	}
	ord := d.Ordinal
	goruntime.LockOSThread()
	defer goruntime.UnlockOSThread()
	var dev C.CUdevice
	if err := check("device", C.gp_device(C.int(ord), &dev)); err != nil {
		return 0, 0, err
	}
	var ctx C.CUcontext
	if err := check("primary context", C.gp_retain(dev, &ctx)); err != nil {
		return 0, 0, err
	}
	defer C.gp_release(dev)
	if err := check("set context", C.gp_set(ctx)); err != nil {
		return 0, 0, err
	}
	var free, tot C.size_t
	if err := check("memory info", C.gp_meminfo(&free, &tot)); err != nil {
		return 0, 0, err
	}
	var bufs []C.CUdeviceptr
	defer func() {
		for _, b := range bufs {
			C.gp_free(b)
		}
	}()
	// Allocate in chunks until the device is full (the context's own
	// memory and other processes' are not ours to zero), then smaller
	// ones for the rest.
	for size := C.size_t(scrubChunk); size >= 1<<20; size /= 4 {
		for {
			var p C.CUdeviceptr
			if C.gp_alloc(&p, size) != 0 {
				break
			}
			bufs = append(bufs, p)
			if err := check("zero", C.gp_memset0(p, size)); err != nil {
				return zeroed, uint64(tot), err
			}
			zeroed += uint64(size)
		}
	}
	if err := check("synchronise", C.gp_sync()); err != nil {
		return zeroed, uint64(tot), err
	}
	return zeroed, uint64(tot), nil
}
