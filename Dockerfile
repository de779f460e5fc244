# Chorus on Node 20 (the only Node its uWebSockets.js build supports: docs/operations.md), as a non-root user, with
# its data directory (PGlite when no DATABASE_URL, uploads, the generated secret, zuliprc) on a volume.
#   docker build -t chorus .
#   docker run -p 9991:9991 -v chorus-data:/data chorus      # embedded: one process, no Redis or Postgres
# compose.yaml runs it with Redis and Postgres and several workers.
FROM node:20-bookworm-slim

ENV NODE_ENV=production \
    DATA_DIR=/data \
    PORT=9991 \
    HOST=0.0.0.0

WORKDIR /app
# Dependencies first, so that a change of the code alone reuses this layer.
COPY package.json package-lock.json ./
RUN npm ci --omit=dev && npm cache clean --force
COPY . .

RUN mkdir -p /data && chown node:node /data
USER node
VOLUME ["/data"]
# 9991: HTTP (both faces, /health, /ready, /metrics); 9464: every worker's metrics, gathered, when WORKERS > 1.
EXPOSE 9991 9464

# Liveness only (see docs/operations.md): no curl in the slim image, so Node asks.
HEALTHCHECK --interval=10s --timeout=3s --start-period=60s --retries=3 \
  CMD ["node", "-e", "fetch('http://127.0.0.1:' + (process.env.PORT || 9991) + '/health').then((r) => process.exit(r.ok ? 0 : 1), () => process.exit(1))"]

# What `npm start` runs, without npm in between: the server gets SIGTERM itself and shuts down gracefully.
CMD ["node", "--max-semi-space-size=64", "--import", "tsx", "gateway/main.ts"]
