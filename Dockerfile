# syntax=docker/dockerfile:1
#
# The effectfence container image: one static binary (CGO_ENABLED=0, -trimpath) on
# distroless/static (CA certificates, tzdata, /etc/passwd; no shell, no package manager),
# running as the unprivileged user nonroot (65532).
#
#   docker build -t effectfence .                      from source (the last stage)
#   docker run --rm effectfence version
#
# The release (GoReleaser dockers_v2, .goreleaser.yaml) builds the stage `release` instead:
# the same final image around the binaries it has already built, which it places in the
# build context as <os>/<arch>/effectfence. Both end in the same layout, so what is tested
# from source is what ships.

ARG GO_VERSION=1.26

FROM --platform=$BUILDPLATFORM golang:${GO_VERSION} AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN --mount=type=cache,target=/go/pkg/mod go mod download
COPY . .
ARG TARGETOS TARGETARCH
ARG VERSION=dev
ARG COMMIT=unknown
RUN --mount=type=cache,target=/go/pkg/mod --mount=type=cache,target=/root/.cache/go-build \
    CGO_ENABLED=0 GOOS=$TARGETOS GOARCH=$TARGETARCH \
    go build -trimpath -ldflags "-s -w -X main.version=${VERSION} -X main.commit=${COMMIT}" \
      -o /out/effectfence ./cmd/effectfence

FROM gcr.io/distroless/static-debian12:nonroot AS base
# The official MCP Registry checks this label against server.json's name before it lists
# the image (docs/RELEASING.md).
LABEL io.modelcontextprotocol.server.name="io.github.effectfence/effectfence" \
      org.opencontainers.image.title="effectfence" \
      org.opencontainers.image.description="The Go effectfence: an MCP proxy and gateway that makes the side effects of tool calls happen once" \
      org.opencontainers.image.source="https://github.com/effectfence/effectfence" \
      org.opencontainers.image.licenses="Apache-2.0"
# The default SQLite ledger lives under $HOME/.local/state/effectfence (/home/nonroot is the
# one directory nonroot owns): mount a volume there. With --ledger postgres://... too, the
# spool there holds the outcomes the database did not take until they are recorded.
USER 65532:65532
WORKDIR /home/nonroot
EXPOSE 8080
ENTRYPOINT ["/usr/local/bin/effectfence"]

FROM base AS release
ARG TARGETPLATFORM
COPY --chmod=0755 ${TARGETPLATFORM}/effectfence /usr/local/bin/effectfence

FROM base
COPY --from=build /out/effectfence /usr/local/bin/effectfence
