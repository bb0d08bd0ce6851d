# make          builds ./gpusnap (version, commit and build date stamped in)
# make deb      writes dist/gpusnap_<version>_<arch>.deb (dpkg-deb)
# make image    writes dist/gpusnap-<version>-<arch>.oci.tar (buildah, root)
# make check    go vet and the tests
# make bench    every benchmark in one run (root, about an hour): writes docs/performance.md
# docs/install.md says what each needs.

GO ?= go
DIST ?= dist
BUILD ?= build

# go-nvml's cgo uses NVML calls its header marks deprecated: ~140 warnings
# that say nothing about gpusnap.
export CGO_CFLAGS ?= -O2 -g -Wno-deprecated-declarations

# The version is the tag at HEAD (v1.2.3 -> 1.2.3); untagged, the next
# release in VERSION, before it (~), with the commit's date and hash.
TAG := $(shell git describe --tags --exact-match --match 'v[0-9]*' 2>/dev/null)
COMMIT := $(shell git rev-parse HEAD 2>/dev/null)$(if $(shell git status --porcelain --untracked-files=no 2>/dev/null),-dirty)
COMMIT_DATE := $(shell TZ=UTC git log -1 --format=%cd --date=format-local:%Y%m%d 2>/dev/null)
VERSION ?= $(if $(TAG),$(TAG:v%=%),$(shell cat VERSION)~git$(COMMIT_DATE).$(shell git rev-parse --short=12 HEAD 2>/dev/null))
# The build date: SOURCE_DATE_EPOCH where set, else the commit's, so that a
# rebuild of one commit is the same binary.
SOURCE_DATE_EPOCH ?= $(shell git log -1 --format=%ct 2>/dev/null)
export SOURCE_DATE_EPOCH
BUILD_DATE := $(shell date -u -d @$(SOURCE_DATE_EPOCH) +%Y-%m-%dT%H:%M:%SZ)
ARCH ?= $(shell dpkg --print-architecture 2>/dev/null || $(GO) env GOARCH)
# An OCI tag has no ~ or +.
IMAGE_TAG := $(subst +,-,$(subst ~,-,$(VERSION)))
IMAGE ?= ghcr.io/gpusnap/gpusnap

LDFLAGS := -s -w -X main.version=$(VERSION) -X main.commit=$(COMMIT) -X main.buildDate=$(BUILD_DATE)
GOBUILD := $(GO) build -trimpath -buildmode=pie -ldflags '$(LDFLAGS)'
# The release binary leaves out urfave/cli's Markdown and roff renderers,
# which every command paid for at start-up (docs/performance.md, Start-up):
# the man pages come from gpusnap-man, the same source built with them.
# gpusnap also leaves out the NRI plugin's packages and Prometheus's client
# library (gpusnap_common): its nri command and watch --listen exec
# gpusnap-full, every command linked, installed beside it or in
# ../libexec/gpusnap.
FULL_TAGS := urfave_cli_no_docs
RELEASE_TAGS := $(FULL_TAGS),gpusnap_common

DEB := $(DIST)/gpusnap_$(VERSION)_$(ARCH).deb
OCI := $(DIST)/gpusnap-$(VERSION)-$(ARCH).oci.tar

.PHONY: all deb image check bench clean version FORCE
all: gpusnap gpusnap-full

version:
	@echo $(VERSION)

# Always handed to go build: its cache knows what changed. deb and image
# build their own copy in BUILD, so that builds in two trees never share one.
gpusnap $(BUILD)/gpusnap: FORCE
	mkdir -p $(@D) && $(GOBUILD) -tags $(RELEASE_TAGS) -o $@ ./cmd/gpusnap

gpusnap-full $(BUILD)/gpusnap-full: FORCE
	mkdir -p $(@D) && $(GOBUILD) -tags $(FULL_TAGS) -o $@ ./cmd/gpusnap

# Only the package's build runs it (gpusnap-man man DIR): it is not installed.
$(BUILD)/gpusnap-man: FORCE
	mkdir -p $(@D) && $(GOBUILD) -o $@ ./cmd/gpusnap

check:
	$(GO) vet ./...
	$(GO) test -race -count=1 ./...

bench:
	bench/all.sh

# The package's tree, in the paths docs/install.md lists.
deb: $(BUILD)/gpusnap $(BUILD)/gpusnap-full $(BUILD)/gpusnap-man
	rm -rf $(BUILD)/deb && umask 022 && R=$(BUILD)/deb && \
	install -D -m 0755 $(BUILD)/gpusnap $$R/usr/bin/gpusnap && \
	install -D -m 0755 $(BUILD)/gpusnap-full $$R/usr/libexec/gpusnap/gpusnap-full && \
	install -D -m 0644 -t $$R/lib/systemd/system contrib/systemd/gpusnap-watch.service \
		contrib/systemd/gpusnap-prune.service contrib/systemd/gpusnap-prune.timer && \
	install -D -m 0755 -t $$R/usr/share/gpusnap/slurm contrib/slurm/prolog.sh contrib/slurm/epilog.sh && \
	install -D -m 0644 -t $$R/usr/share/gpusnap/slurm contrib/slurm/settings.sh && \
	install -D -m 0644 packaging/default $$R/etc/default/gpusnap && \
	install -D -m 0644 contrib/allow/allow.list $$R/etc/gpusnap/allow.list && \
	install -d $$R/usr/share/man/man1 && $(BUILD)/gpusnap-man man $$R/usr/share/man/man1 && gzip -9n $$R/usr/share/man/man1/*.1 && \
	install -d $$R/usr/share/bash-completion/completions $$R/usr/share/zsh/vendor-completions $$R/usr/share/fish/vendor_completions.d && \
	$(BUILD)/gpusnap completion bash >$$R/usr/share/bash-completion/completions/gpusnap && \
	$(BUILD)/gpusnap completion zsh >$$R/usr/share/zsh/vendor-completions/_gpusnap && \
	$(BUILD)/gpusnap completion fish >$$R/usr/share/fish/vendor_completions.d/gpusnap.fish && \
	install -D -m 0644 packaging/copyright $$R/usr/share/doc/gpusnap/copyright && \
	install -m 0644 -t $$R/usr/share/doc/gpusnap docs/*.md && \
	install -D -m 0644 -t $$R/usr/share/doc/gpusnap/schema docs/schema/*.schema.json && \
	sed '1s/([^)]*)/($(VERSION))/' packaging/changelog | gzip -9n >$$R/usr/share/doc/gpusnap/changelog.gz && \
	install -d $$R/DEBIAN && \
	printf '/etc/default/gpusnap\n/etc/gpusnap/allow.list\n' >$$R/DEBIAN/conffiles && \
	(cd $$R && find usr lib -type f -print0 | sort -z | xargs -0 md5sum) >$$R/DEBIAN/md5sums && \
	glibc=$$(objdump -T $(BUILD)/gpusnap | grep -o 'GLIBC_[0-9.]*' | sed 's/GLIBC_//' | sort -uV | tail -n 1) && \
	{ sed -n '1,/^Suggests:/p' packaging/control; \
	  echo "Version: $(VERSION)"; echo "Architecture: $(ARCH)"; \
	  echo "Depends: libc6 (>= $$glibc)"; \
	  echo "Installed-Size: $$(du -sk --exclude=DEBIAN $$R | cut -f1)"; \
	  sed '1,/^Suggests:/d' packaging/control; } >$$R/DEBIAN/control && \
	find $$R -exec touch -h -d @$(SOURCE_DATE_EPOCH) {} + && \
	mkdir -p $(DIST) && dpkg-deb --root-owner-group -Zxz --build $$R $(DEB)

# FROM scratch: gpusnap, gpusnap-full (the nri command's) and the libraries
# they link (glibc), nothing else. libnvidia-ml comes from the host, as
# NVIDIA's container toolkit mounts it.
image: $(BUILD)/gpusnap $(BUILD)/gpusnap-full
	rm -rf $(BUILD)/image && mkdir -p $(BUILD)/image/usr/bin $(BUILD)/image/usr/libexec/gpusnap $(BUILD)/image/tmp $(DIST) && \
	chmod 1777 $(BUILD)/image/tmp && cp $(BUILD)/gpusnap $(BUILD)/image/usr/bin/gpusnap && \
	cp $(BUILD)/gpusnap-full $(BUILD)/image/usr/libexec/gpusnap/gpusnap-full && \
	for lib in $$({ ldd $(BUILD)/gpusnap && ldd $(BUILD)/gpusnap-full; } | grep -o '/[^ ]*' | sort -u); do \
		install -D -m 0755 $$(readlink -f $$lib) $(BUILD)/image$$lib || exit 1; done && \
	printf 'root:x:0:0:root:/root:/sbin/nologin\n' >$(BUILD)/image/etc-passwd && \
	install -D -m 0644 $(BUILD)/image/etc-passwd $(BUILD)/image/etc/passwd && rm $(BUILD)/image/etc-passwd && \
	ctr=$$(buildah from scratch) && \
	trap 'buildah rm $$ctr >/dev/null' EXIT && \
	buildah add --quiet $$ctr $(BUILD)/image / && \
	buildah config --entrypoint '["/usr/bin/gpusnap"]' --cmd watch \
		--env GPUSNAP_DB=/var/lib/gpusnap/gpusnap.db \
		--label org.opencontainers.image.title=gpusnap \
		--label org.opencontainers.image.version=$(VERSION) \
		--label org.opencontainers.image.revision=$(COMMIT) \
		--label org.opencontainers.image.source=https://github.com/gpusnap/gpusnap \
		--created-by 'make image' $$ctr && \
	buildah commit --quiet --format oci --timestamp $(SOURCE_DATE_EPOCH) --rm $$ctr oci-archive:$(OCI):$(IMAGE):$(IMAGE_TAG) && \
	trap - EXIT && echo $(OCI)

clean:
	rm -rf gpusnap gpusnap-full $(BUILD) $(DIST)
