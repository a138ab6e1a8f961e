# One multi-stage build with a target per service. Images are named
# plexus/<service>:<tag>, as deploy/ and docker-compose.yaml use them;
# `make images` builds all of them (IMAGE_PREFIX, IMAGE_TAG), or one:
#   docker build --build-arg COMMIT=$(git rev-parse --short=12 HEAD) --target allocator -t plexus/allocator:latest .
# The release is the VERSION file, which the build embeds.
FROM golang:1.26 AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
ARG COMMIT=unknown
RUN CGO_ENABLED=0 go build -trimpath -ldflags="-s -w -X github.com/plexusnet/plexus/internal/version.commit=${COMMIT}" -o /out/ \
      ./services/allocator ./services/membership ./services/importer ./services/repair ./clients/plexusctl \
      ./internal/testing/kubetest/cmd/localkube

# Static binaries on a minimal, non-root base.
FROM gcr.io/distroless/static-debian12:nonroot AS base
USER nonroot:nonroot

FROM base AS allocator
COPY --from=build /out/allocator /plexus-allocator
ENTRYPOINT ["/plexus-allocator"]

FROM base AS membership
COPY --from=build /out/membership /plexus-membership
ENTRYPOINT ["/plexus-membership"]

FROM base AS importer
COPY --from=build /out/importer /plexus-importer
ENTRYPOINT ["/plexus-importer"]

FROM base AS repair
COPY --from=build /out/repair /plexus-repair
ENTRYPOINT ["/plexus-repair"]

# docker-compose's one-shot cluster setup: `localkube pki` writes the API
# server's certificates and kubeconfig, `localkube crds` installs the CRDs.
FROM base AS localkube
COPY --from=build /out/localkube /localkube
ENTRYPOINT ["/localkube"]
