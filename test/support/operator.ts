/** A test server whose owner is the assistant's operator, with an API key for its endpoints. */
import { operatorKey } from "../gateway/assistant/support.ts";
import { startTestServer, type EngineName, type TestServer } from "./server.ts";

export async function startOperatorServer(engine: EngineName): Promise<{ server: TestServer; key: string }> {
  const server = await startTestServer(engine);
  try {
    return { server, key: await operatorKey(server) };
  } catch (err) {
    await server.close(); // a failed setup leaves no server behind
    throw err;
  }
}
