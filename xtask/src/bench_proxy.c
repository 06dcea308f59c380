/* The proxy bench's upstream, load generator and idle-tunnel opener, in one
 * small C program (compiled by `cargo xtask bench` with gcc) so that neither
 * side of the measurement pays a process start per request.
 *
 *   serve                       port 80: HTTP, one thread per connection,
 *                               GET /small -> 2 bytes, GET /big -> 512 MiB,
 *                               persistent unless asked to close;
 *                               port 81: accepts and holds connections.
 *   load HOST PORT PATH C SECS [PROXY]   (HOST: an address, or NAME=ADDRESS)
 *                               C threads, each: new TCP connection, one
 *                               GET, read the whole response, close (RST);
 *                               for SECS. Direct to HOST:PORT, or through
 *                               PROXY (http://[user:pass@]ip:port) in absolute
 *                               form, or, with PROXY as connect+http://…, in
 *                               a CONNECT tunnel of its own per request.
 *                               Prints `ok= err= rps= p50_us= p99_us=`.
 *   tunnels N TARGET PROXY DIR  opens N CONNECT tunnels to TARGET through
 *                               PROXY; writes DIR/opened-0 before and
 *                               DIR/opened-1 after, waits for DIR/go-0 and
 *                               DIR/go-1.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define BIG (512ULL << 20)

static void die(const char *what) {
	perror(what);
	exit(2);
}

static void raise_nofile(void) {
	struct rlimit r;
	if (getrlimit(RLIMIT_NOFILE, &r) == 0) {
		r.rlim_cur = r.rlim_max;
		setrlimit(RLIMIT_NOFILE, &r);
	}
}

static double now(void) {
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec + t.tv_nsec / 1e9;
}

static int write_all(int fd, const char *p, size_t n) {
	while (n > 0) {
		ssize_t w = write(fd, p, n);
		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0)
			return -1;
		p += w;
		n -= (size_t)w;
	}
	return 0;
}

/* Read a head up to "\r\n\r\n"; returns bytes in buf (head + any body start), or -1. */
static ssize_t read_head(int fd, char *buf, size_t cap, size_t *head_len) {
	size_t got = 0;
	while (got < cap - 1) {
		ssize_t r = read(fd, buf + got, cap - 1 - got);
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			return -1;
		got += (size_t)r;
		buf[got] = 0;
		char *e = strstr(buf, "\r\n\r\n");
		if (e) {
			*head_len = (size_t)(e - buf) + 4;
			return (ssize_t)got;
		}
	}
	return -1;
}

/* ---- serve ---- */

static char zeros[1 << 20];

static void *http_conn(void *arg) {
	int fd = (int)(intptr_t)arg;
	char buf[4096];
	size_t hl;
	/* Persistent unless the request says "Connection: close" (the load
	 * generator always does; a proxy may keep its upstream connection).
	 * Requests are not pipelined by either, so one head per read_head. */
	while (read_head(fd, buf, sizeof buf, &hl) > 0) {
		buf[hl] = 0;
		int close_after = strcasestr(buf, "\r\nconnection: close\r\n") != NULL;
		const char *conn = close_after ? "close" : "keep-alive";
		char h[160];
		if (strncmp(buf, "GET /big", 8) == 0) {
			int n = snprintf(h, sizeof h,
					 "HTTP/1.1 200 OK\r\nContent-Length: %llu\r\nConnection: %s\r\n\r\n",
					 BIG, conn);
			if (write_all(fd, h, (size_t)n) < 0)
				break;
			unsigned long long left = BIG;
			while (left > 0) {
				size_t k = left < sizeof zeros ? left : sizeof zeros;
				if (write_all(fd, zeros, k) < 0)
					break;
				left -= k;
			}
			if (left > 0)
				break;
		} else {
			int n = snprintf(h, sizeof h,
					 "HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: %s\r\n\r\nok",
					 conn);
			if (write_all(fd, h, (size_t)n) < 0)
				break;
		}
		if (close_after)
			break;
	}
	close(fd);
	return NULL;
}

static int listen_on(int port) {
	int s = socket(AF_INET, SOCK_STREAM, 0), one = 1;
	if (s < 0)
		die("socket");
	setsockopt(s, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(port)};
	if (bind(s, (struct sockaddr *)&a, sizeof a) < 0)
		die("bind");
	if (listen(s, 4096) < 0)
		die("listen");
	return s;
}

static void *hold(void *arg) {
	int s = (int)(intptr_t)arg;
	for (;;) {
		int c = accept(s, NULL, NULL);
		if (c < 0 && errno != EINTR && errno != ECONNABORTED)
			sleep(1); /* out of fds: keep what we hold */
	}
	return NULL;
}

static int serve(void) {
	raise_nofile();
	signal(SIGPIPE, SIG_IGN);
	int s80 = listen_on(80), s81 = listen_on(81);
	pthread_attr_t at;
	pthread_attr_init(&at);
	pthread_attr_setstacksize(&at, 64 << 10);
	pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
	pthread_t t;
	pthread_create(&t, &at, hold, (void *)(intptr_t)s81);
	for (;;) {
		int c = accept(s80, NULL, NULL);
		if (c < 0)
			continue;
		if (pthread_create(&t, &at, http_conn, (void *)(intptr_t)c) != 0)
			close(c);
	}
	return 0;
}

/* ---- proxy URL ---- */

struct proxy {
	int on;
	struct sockaddr_in addr;
	char auth[512]; /* "Proxy-Authorization: Basic …\r\n" or "" */
};

static void b64(const char *in, char *out) {
	static const char t[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
	size_t n = strlen(in), i, o = 0;
	for (i = 0; i + 2 < n; i += 3) {
		uint32_t v = (uint8_t)in[i] << 16 | (uint8_t)in[i + 1] << 8 | (uint8_t)in[i + 2];
		out[o++] = t[v >> 18];
		out[o++] = t[v >> 12 & 63];
		out[o++] = t[v >> 6 & 63];
		out[o++] = t[v & 63];
	}
	if (n - i == 1) {
		uint32_t v = (uint8_t)in[i] << 16;
		out[o++] = t[v >> 18];
		out[o++] = t[v >> 12 & 63];
		out[o++] = '=';
		out[o++] = '=';
	} else if (n - i == 2) {
		uint32_t v = (uint8_t)in[i] << 16 | (uint8_t)in[i + 1] << 8;
		out[o++] = t[v >> 18];
		out[o++] = t[v >> 12 & 63];
		out[o++] = t[v >> 6 & 63];
		out[o++] = '=';
	}
	out[o] = 0;
}

/* Percent-decode `n` bytes of `in` into `out` (NUL-terminated), as curl does for URL userinfo. */
static void pct_decode(const char *in, size_t n, char *out, size_t cap) {
	size_t o = 0;
	for (size_t i = 0; i < n && o + 1 < cap; i++) {
		unsigned v;
		if (in[i] == '%' && i + 2 < n && sscanf(in + i + 1, "%2x", &v) == 1) {
			out[o++] = (char)v;
			i += 2;
		} else {
			out[o++] = in[i];
		}
	}
	out[o] = 0;
}

static void parse_proxy(const char *url, struct proxy *p) {
	memset(p, 0, sizeof *p);
	if (!url || !*url)
		return;
	p->on = 1;
	const char *s = strstr(url, "://");
	s = s ? s + 3 : url;
	const char *at = strrchr(s, '@');
	if (at) {
		char cred[256], enc[384];
		pct_decode(s, (size_t)(at - s), cred, sizeof cred);
		b64(cred, enc);
		snprintf(p->auth, sizeof p->auth, "Proxy-Authorization: Basic %s\r\n", enc);
		s = at + 1;
	}
	char host[64];
	const char *colon = strrchr(s, ':');
	if (!colon)
		die("proxy URL without port");
	snprintf(host, sizeof host, "%.*s", (int)(colon - s), s);
	if (strcmp(host, "localhost") == 0)
		strcpy(host, "127.0.0.1");
	p->addr.sin_family = AF_INET;
	p->addr.sin_port = htons((uint16_t)atoi(colon + 1));
	if (inet_pton(AF_INET, host, &p->addr.sin_addr) != 1)
		die("proxy host is not an IPv4 address");
}

/* ---- load ---- */

struct load {
	struct sockaddr_in dst;
	/* The CONNECT sent first, answered 200 before req goes (none: empty). */
	char pre[1024];
	size_t pre_len;
	char req[1024];
	size_t req_len;
	double end;
	double *lat;
	size_t cap, n, err;
};

static int one_request(struct load *l) {
	int s = socket(AF_INET, SOCK_STREAM, 0);
	if (s < 0)
		return -1;
	int one = 1, rc = -1;
	setsockopt(s, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
	char buf[8192];
	size_t hl;
	int tunneled = 1;
	if (l->pre_len) {
		tunneled = 0;
		if (connect(s, (struct sockaddr *)&l->dst, sizeof l->dst) == 0 &&
		    write_all(s, l->pre, l->pre_len) == 0) {
			ssize_t got = read_head(s, buf, sizeof buf, &hl);
			tunneled = got > 0 && (size_t)got == hl && strncmp(buf + 9, "200", 3) == 0;
		}
	}
	if (tunneled && (l->pre_len || connect(s, (struct sockaddr *)&l->dst, sizeof l->dst) == 0) &&
	    write_all(s, l->req, l->req_len) == 0) {
		ssize_t got = read_head(s, buf, sizeof buf, &hl);
		if (got > 0 && strncmp(buf + 9, "200", 3) == 0) {
			char *cl = strcasestr(buf, "\r\nContent-Length:");
			long want = cl ? atol(cl + 17) : 0;
			long have = (long)((size_t)got - hl);
			while (have < want) {
				ssize_t r = read(s, buf, sizeof buf);
				if (r <= 0)
					break;
				have += r;
			}
			if (have >= want)
				rc = 0;
		}
	}
	/* RST instead of TIME_WAIT: thousands of short connections per second. */
	struct linger lg = {1, 0};
	setsockopt(s, SOL_SOCKET, SO_LINGER, &lg, sizeof lg);
	close(s);
	return rc;
}

static void *load_thread(void *arg) {
	struct load *l = arg;
	for (;;) {
		double t0 = now();
		if (t0 >= l->end)
			break;
		if (one_request(l) == 0) {
			if (l->n < l->cap)
				l->lat[l->n++] = now() - t0;
		} else {
			l->err++;
		}
	}
	return NULL;
}

static int cmp(const void *a, const void *b) {
	double x = *(const double *)a, y = *(const double *)b;
	return x < y ? -1 : x > y;
}

static int load(int argc, char **argv) {
	if (argc < 7)
		die("usage: load HOST PORT PATH C SECS [PROXY]");
	raise_nofile();
	signal(SIGPIPE, SIG_IGN);
	/* HOST may be NAME=ADDRESS: dial ADDRESS, name NAME in the request (the
	 * transparent path, whose proxy refuses a Host other than the name the
	 * address was handed out for). */
	char name_buf[256];
	const char *host = argv[2], *path = argv[4], *dial = argv[2];
	const char *eq = strchr(argv[2], '=');
	if (eq) {
		snprintf(name_buf, sizeof name_buf, "%.*s", (int)(eq - argv[2]), argv[2]);
		host = name_buf;
		dial = eq + 1;
	}
	int port = atoi(argv[3]), c = atoi(argv[5]);
	double secs = atof(argv[6]);
	struct proxy px;
	const char *purl = argc > 7 ? argv[7] : "";
	int tunnel = strncmp(purl, "connect+", 8) == 0;
	parse_proxy(tunnel ? purl + 8 : purl, &px);
	struct load *ls = calloc((size_t)c, sizeof *ls);
	pthread_t *ts = calloc((size_t)c, sizeof *ts);
	size_t cap = 4000000 / (size_t)c;
	double start = now(), end = start + secs;
	for (int i = 0; i < c; i++) {
		struct load *l = &ls[i];
		if (px.on && tunnel) {
			l->dst = px.addr;
			l->pre_len = (size_t)snprintf(l->pre, sizeof l->pre,
						      "CONNECT %s:%d HTTP/1.1\r\nHost: %s:%d\r\n%s\r\n",
						      host, port, host, port, px.auth);
			l->req_len = (size_t)snprintf(l->req, sizeof l->req,
						      "GET %s HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n",
						      path, host);
		} else if (px.on) {
			l->dst = px.addr;
			l->req_len = (size_t)snprintf(l->req, sizeof l->req,
						      "GET http://%s:%d%s HTTP/1.1\r\nHost: %s:%d\r\n%sConnection: close\r\n\r\n",
						      host, port, path, host, port, px.auth);
		} else {
			l->dst.sin_family = AF_INET;
			l->dst.sin_port = htons((uint16_t)port);
			if (inet_pton(AF_INET, dial, &l->dst.sin_addr) != 1)
				die("direct host is not an IPv4 address");
			l->req_len = (size_t)snprintf(l->req, sizeof l->req,
						      "GET %s HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n",
						      path, host);
		}
		l->end = end;
		l->cap = cap;
		l->lat = malloc(cap * sizeof(double));
		pthread_create(&ts[i], NULL, load_thread, l);
	}
	size_t n = 0, err = 0;
	for (int i = 0; i < c; i++) {
		pthread_join(ts[i], NULL);
		n += ls[i].n;
		err += ls[i].err;
	}
	double took = now() - start;
	double *all = malloc((n ? n : 1) * sizeof(double));
	for (int i = 0, k = 0; i < c; i++) {
		memcpy(all + k, ls[i].lat, ls[i].n * sizeof(double));
		k += (int)ls[i].n;
	}
	qsort(all, n, sizeof(double), cmp);
	double p50 = n ? all[n / 2] : 0, p99 = n ? all[(size_t)((double)n * 0.99)] : 0;
	printf("ok=%zu err=%zu rps=%.0f p50_us=%.0f p99_us=%.0f\n", n, err, (double)n / took,
	       p50 * 1e6, p99 * 1e6);
	return 0;
}

/* ---- tunnels ---- */

static void touch(const char *dir, const char *name) {
	char p[4096];
	snprintf(p, sizeof p, "%s/%s", dir, name);
	FILE *f = fopen(p, "w");
	if (f)
		fclose(f);
}

static void wait_for(const char *dir, const char *name) {
	char p[4096];
	struct stat st;
	snprintf(p, sizeof p, "%s/%s", dir, name);
	for (int i = 0; i < 60000 && stat(p, &st) != 0; i++)
		usleep(1000);
}

static int tunnels(int argc, char **argv) {
	if (argc < 6)
		die("usage: tunnels N TARGET PROXY DIR");
	raise_nofile();
	int n = atoi(argv[2]), opened = 0;
	const char *target = argv[3], *dir = argv[5];
	struct proxy px;
	parse_proxy(argv[4], &px);
	touch(dir, "opened-0");
	wait_for(dir, "go-0");
	char req[512];
	int len = snprintf(req, sizeof req, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n%s\r\n", target,
			   target, px.auth);
	for (int i = 0; i < n; i++) {
		int s = socket(AF_INET, SOCK_STREAM, 0);
		if (s < 0)
			break;
		char buf[1024];
		size_t hl;
		if (connect(s, (struct sockaddr *)&px.addr, sizeof px.addr) != 0 ||
		    write_all(s, req, (size_t)len) != 0 || read_head(s, buf, sizeof buf, &hl) < 0 ||
		    strncmp(buf + 9, "200", 3) != 0) {
			close(s);
			break;
		}
		opened++; /* kept open, idle, until exit */
	}
	printf("opened=%d\n", opened);
	fflush(stdout);
	touch(dir, "opened-1");
	wait_for(dir, "go-1");
	return 0;
}

int main(int argc, char **argv) {
	if (argc > 1 && strcmp(argv[1], "serve") == 0)
		return serve();
	if (argc > 1 && strcmp(argv[1], "load") == 0)
		return load(argc, argv);
	if (argc > 1 && strcmp(argv[1], "tunnels") == 0)
		return tunnels(argc, argv);
	fprintf(stderr, "usage: bench_proxy serve | load … | tunnels …\n");
	return 2;
}
