//go:build linux && cgo

// A process job's init, for cgo builds: run from an ELF constructor when the
// binary is started as Arg0 with Env set, before the Go runtime starts, so
// that starting a job costs an exec and a few syscalls rather than a Go
// runtime's start-up and the initialisation of every package the daemon
// links. It does what init_nocgo_linux.go does and speaks the wire that
// proto_linux.go defines (Config.Encode, ReadMsg); the behaviour is
// described there. The process is single-threaded here, so setuid and the
// seccomp filter apply to the whole of it.

#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#define JI_ARG0 "gpumesh-job-init"
#define JI_ENV "GPUMESH_JOB_INIT="
#define JI_MAGIC 0x314a4d47u
#define JI_FLAG_PID1 1u
#define JI_MAX_CONFIG (16u << 20)
#define JI_MAX_ERR 4096u

enum { JI_MSG_PID = 1, JI_MSG_STATUS = 2, JI_MSG_ERR = 3 };

static int ji_conn = -1;
static volatile pid_t ji_child = 0;

static int ji_write_all(int fd, const void *p, size_t n) {
	const char *b = p;
	while (n > 0) {
		ssize_t w = write(fd, b, n);
		if (w < 0) {
			if (errno == EINTR)
				continue;
			return -1;
		}
		b += w;
		n -= (size_t)w;
	}
	return 0;
}

static int ji_read_all(int fd, void *p, size_t n) {
	char *b = p;
	while (n > 0) {
		ssize_t r = read(fd, b, n);
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			return -1;
		b += r;
		n -= (size_t)r;
	}
	return 0;
}

static int ji_send(uint32_t kind, uint32_t value, int32_t err, const char *text) {
	static unsigned char buf[16 + JI_MAX_ERR];
	uint32_t len = text ? (uint32_t)strlen(text) : 0;
	if (len > JI_MAX_ERR)
		len = JI_MAX_ERR;
	uint32_t hdr[4] = {kind, value, (uint32_t)err, len};
	memcpy(buf, hdr, sizeof hdr);
	if (len > 0)
		memcpy(buf + sizeof hdr, text, len);
	return ji_write_all(ji_conn, buf, sizeof hdr + len);
}

// ji_fail reports why the command does not run (exec_errno: what executing
// it returned, 0 when it was not that) and exits.
static void ji_fail(int exec_errno, const char *fmt, ...) __attribute__((noreturn, format(printf, 2, 3)));
static void ji_fail(int exec_errno, const char *fmt, ...) {
	char text[512];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(text, sizeof text, fmt, ap);
	va_end(ap);
	if (ji_send(JI_MSG_ERR, 0, exec_errno, text) != 0)
		dprintf(2, "%s: %s\n", JI_ARG0, text);
	_exit(127);
}

static void ji_refuse(void) __attribute__((noreturn));
static void ji_refuse(void) {
	dprintf(2, "%s: not started by the daemon\n", JI_ARG0);
	_exit(127);
}

// The config, decoded.
struct ji_config {
	int pid1;
	int32_t uid, gid;
	uint32_t nfilter;
	struct sock_filter *filter;
	char *token, *path, *dir;
	char **args, **env;
};

struct ji_cursor {
	const unsigned char *p, *end;
	int bad;
};

static uint32_t ji_u32(struct ji_cursor *c) {
	uint32_t v = 0;
	if (c->end - c->p < 4) {
		c->bad = 1;
		return 0;
	}
	memcpy(&v, c->p, 4);
	c->p += 4;
	return v;
}

// ji_str copies the next string, NUL-terminated; a string holding a NUL
// cannot be passed to exec and makes the config bad.
static char *ji_str(struct ji_cursor *c) {
	uint32_t n = ji_u32(c);
	if (c->bad || (uint64_t)(c->end - c->p) < n || memchr(c->p, 0, n) != NULL) {
		c->bad = 1;
		return NULL;
	}
	char *s = malloc((size_t)n + 1);
	if (s == NULL) {
		c->bad = 1;
		return NULL;
	}
	memcpy(s, c->p, n);
	s[n] = 0;
	c->p += n;
	return s;
}

static char **ji_strs(struct ji_cursor *c, uint32_t n) {
	if (c->bad || (uint64_t)n * 4 > (uint64_t)(c->end - c->p)) {
		c->bad = 1;
		return NULL;
	}
	char **v = calloc((size_t)n + 1, sizeof *v);
	if (v == NULL) {
		c->bad = 1;
		return NULL;
	}
	for (uint32_t i = 0; i < n && !c->bad; i++)
		v[i] = ji_str(c);
	return v;
}

static int ji_decode(const unsigned char *b, uint32_t n, struct ji_config *cfg) {
	struct ji_cursor c = {b, b + n, 0};
	uint32_t h[7];
	for (int i = 0; i < 7; i++)
		h[i] = ji_u32(&c);
	if (c.bad || h[0] != JI_MAGIC)
		return -1;
	cfg->pid1 = (h[1] & JI_FLAG_PID1) != 0;
	cfg->uid = (int32_t)h[2];
	cfg->gid = (int32_t)h[3];
	cfg->token = ji_str(&c);
	cfg->path = ji_str(&c);
	cfg->dir = ji_str(&c);
	if (c.bad || (uint64_t)h[4] * 8 > (uint64_t)(c.end - c.p) || h[4] > 0xffff)
		return -1;
	cfg->nfilter = h[4];
	cfg->filter = calloc(h[4] ? h[4] : 1, sizeof *cfg->filter);
	if (cfg->filter == NULL)
		return -1;
	for (uint32_t i = 0; i < h[4]; i++) {
		memcpy(&cfg->filter[i].code, c.p, 2);
		cfg->filter[i].jt = c.p[2];
		cfg->filter[i].jf = c.p[3];
		memcpy(&cfg->filter[i].k, c.p + 4, 4);
		c.p += 8;
	}
	cfg->args = ji_strs(&c, h[5]);
	cfg->env = ji_strs(&c, h[6]);
	if (c.bad || c.p != c.end || h[5] == 0)
		return -1;
	return 0;
}

static int ji_token_equal(const char *a, const char *b) {
	size_t n = strlen(a);
	if (n == 0 || n != strlen(b))
		return 0;
	unsigned char d = 0;
	for (size_t i = 0; i < n; i++)
		d |= (unsigned char)a[i] ^ (unsigned char)b[i];
	return d == 0;
}

// ji_enter makes the process what the job's command may start from.
static void ji_enter(const struct ji_config *cfg) {
	if (cfg->pid1) {
		if (getpid() != 1)
			ji_fail(0, "not the first process of a PID namespace (pid %d)", (int)getpid());
		if (mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, "hidepid=2") != 0)
			ji_fail(0, "mount /proc: %s", strerror(errno));
	}
	if (prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) != 0)
		ji_fail(0, "set not dumpable: %s", strerror(errno));
	if (cfg->uid >= 0) {
		if (setgroups(0, NULL) != 0)
			ji_fail(0, "setgroups: %s", strerror(errno));
		if (setgid((gid_t)cfg->gid) != 0)
			ji_fail(0, "setgid %d: %s", cfg->gid, strerror(errno));
		if (setuid((uid_t)cfg->uid) != 0)
			ji_fail(0, "setuid %d: %s", cfg->uid, strerror(errno));
	}
	if (cfg->nfilter > 0) {
		struct sock_fprog prog = {(unsigned short)cfg->nfilter, cfg->filter};
		if (syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, SECCOMP_FILTER_FLAG_TSYNC, &prog) != 0)
			ji_fail(0, "install seccomp filter: %s", strerror(errno));
	}
}

static const int ji_forwarded[] = {SIGTERM, SIGINT, SIGHUP, SIGUSR1, SIGUSR2, SIGQUIT};
#define JI_NFORWARDED (sizeof ji_forwarded / sizeof ji_forwarded[0])

static void ji_forward(int sig) {
	int saved = errno;
	if (ji_child > 0)
		kill(ji_child, sig);
	errno = saved;
}

// ji_pid1 starts the command as the namespace's only child, reports its pid,
// forwards signals to it, reaps orphans and reports its wait status.
static void ji_pid1(const struct ji_config *cfg) __attribute__((noreturn));
static void ji_pid1(const struct ji_config *cfg) {
	sigset_t forwarded, old;
	sigemptyset(&forwarded);
	for (size_t i = 0; i < JI_NFORWARDED; i++)
		sigaddset(&forwarded, ji_forwarded[i]);
	// Blocked until the command exists, so that none is lost: a signal an
	// init has no handler for is discarded.
	sigprocmask(SIG_BLOCK, &forwarded, &old);
	struct sigaction sa;
	memset(&sa, 0, sizeof sa);
	sa.sa_handler = ji_forward;
	sa.sa_flags = SA_RESTART;
	sigemptyset(&sa.sa_mask);
	for (size_t i = 0; i < JI_NFORWARDED; i++)
		sigaction(ji_forwarded[i], &sa, NULL);
	int ep[2];
	if (pipe2(ep, O_CLOEXEC) != 0)
		ji_fail(0, "pipe: %s", strerror(errno));
	// vfork: the child only resets the forwarded signals (its handler
	// table is its own), changes directory and execs or reports why not
	// through ep (its fds are its own too), all system calls on its own
	// stack, so it runs in the init's memory until the exec instead of a
	// copy of it (about 1 ms of CPU a job on a VM where page tables are
	// dear, BenchmarkProcessJobOverhead).
	pid_t pid = vfork();
	if (pid < 0)
		ji_fail(errno, "exec %s: %s", cfg->path, strerror(errno));
	if (pid == 0) {
		close(ep[0]);
		struct sigaction dfl;
		memset(&dfl, 0, sizeof dfl);
		dfl.sa_handler = SIG_DFL;
		for (size_t i = 0; i < JI_NFORWARDED; i++)
			sigaction(ji_forwarded[i], &dfl, NULL);
		sigprocmask(SIG_SETMASK, &old, NULL);
		int e = 0;
		if (cfg->dir[0] != 0 && chdir(cfg->dir) != 0)
			e = errno;
		if (e == 0) {
			execve(cfg->path, cfg->args, cfg->env);
			e = errno;
		}
		ji_write_all(ep[1], &e, sizeof e);
		_exit(127);
	}
	ji_child = pid;
	close(ep[1]);
	int e = 0;
	ssize_t r;
	do
		r = read(ep[0], &e, sizeof e);
	while (r < 0 && errno == EINTR);
	close(ep[0]);
	if (r == (ssize_t)sizeof e)
		ji_fail(e ? e : ENOEXEC, "exec %s: %s", cfg->path, strerror(e ? e : ENOEXEC));
	if (ji_send(JI_MSG_PID, (uint32_t)pid, 0, NULL) != 0)
		_exit(127); // the daemon is gone: so is the job
	sigprocmask(SIG_SETMASK, &old, NULL);
	for (;;) {
		int st = 0;
		pid_t got = wait4(-1, &st, 0, NULL);
		if (got < 0) {
			if (errno == EINTR)
				continue;
			ji_fail(0, "wait: %s", strerror(errno));
		}
		if (got != pid)
			continue; // an orphan, reaped
		ji_send(JI_MSG_STATUS, (uint32_t)st, 0, NULL);
		if (WIFSIGNALED(st))
			_exit(128 + WTERMSIG(st));
		_exit(WEXITSTATUS(st));
	}
}

static void ji_run(const char *marker) __attribute__((noreturn));
static void ji_run(const char *marker) {
	char *end = NULL;
	errno = 0;
	long fd = strtol(marker, &end, 10);
	if (errno != 0 || end == marker || *end != ':' || fd < 3 || fd > 1 << 20) {
		dprintf(2, "%s: bad GPUMESH_JOB_INIT\n", JI_ARG0);
		_exit(127);
	}
	const char *token = end + 1;
	ji_conn = (int)fd;
	if (fcntl(ji_conn, F_SETFD, FD_CLOEXEC) != 0)
		ji_refuse();
	uint32_t n = 0;
	if (ji_read_all(ji_conn, &n, sizeof n) != 0 || n > JI_MAX_CONFIG)
		ji_refuse();
	unsigned char *b = malloc(n ? n : 1);
	struct ji_config cfg;
	memset(&cfg, 0, sizeof cfg);
	if (b == NULL || ji_read_all(ji_conn, b, n) != 0 || ji_decode(b, n, &cfg) != 0 ||
	    !ji_token_equal(cfg.token, token))
		ji_refuse();
	free(b);
	ji_enter(&cfg);
	if (cfg.pid1)
		ji_pid1(&cfg);
	if (cfg.dir[0] != 0 && chdir(cfg.dir) != 0)
		ji_fail(errno, "chdir %s: %s", cfg.dir, strerror(errno));
	execve(cfg.path, cfg.args, cfg.env);
	ji_fail(errno ? errno : ENOEXEC, "exec %s: %s", cfg.path, strerror(errno));
}

// glibc passes constructors the program's argc, argv and envp.
__attribute__((constructor)) static void gpumesh_job_init(int argc, char **argv, char **envp) {
	if (argc != 1 || argv == NULL || argv[0] == NULL || strcmp(argv[0], JI_ARG0) != 0 || envp == NULL)
		return;
	for (char **e = envp; *e != NULL; e++) {
		if (strncmp(*e, JI_ENV, sizeof JI_ENV - 1) == 0)
			ji_run(*e + sizeof JI_ENV - 1);
	}
}
