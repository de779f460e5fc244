/**
 * OpenTelemetry, off by default. The code always creates spans through @opentelemetry/api (no-ops without an
 * SDK); the SDK starts only when the standard variables ask for an exporter (OTEL_TRACES_EXPORTER other than
 * "none", or OTEL_EXPORTER_OTLP_ENDPOINT), and then reads every other OTEL_* variable itself.
 */
export async function startTelemetry(): Promise<{ shutdown(): Promise<void> } | undefined> {
  const exporter = process.env.OTEL_TRACES_EXPORTER;
  const wanted = (exporter && exporter !== "none") || process.env.OTEL_EXPORTER_OTLP_ENDPOINT;
  if (!wanted || process.env.OTEL_SDK_DISABLED === "true") return undefined;
  const { NodeSDK } = await import("@opentelemetry/sdk-node");
  const sdk = new NodeSDK({ serviceName: process.env.OTEL_SERVICE_NAME ?? "chorus" });
  sdk.start();
  return sdk;
}
