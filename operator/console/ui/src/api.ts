// The console backend's JSON (docs/console.md): the snapshot every page reads, and the
// management endpoints the dialogs call. Fields the backend may omit are optional; a missing
// number is shown as unavailable, never as zero.

export interface Condition {
  type: string;
  status: string;
  reason?: string;
  message?: string;
  lastTransitionTime?: string;
}

export interface HistogramSnapshot {
  bounds: number[];
  counts: number[];
  sum_seconds: number;
  count: number;
}

export interface Pvc {
  name?: string;
  phase?: string;
  requested?: string;
  capacity?: string;
  storage_class?: string;
}

export interface ObservedDisk {
  total_bytes: number;
  available_bytes: number;
  used_percent: number;
  pressure: boolean;
}

export interface Observation {
  registry_revision?: number;
  node?: { id: number; address: string; version: string };
  readiness?: Record<string, boolean>;
  disk?: ObservedDisk;
  runtime?: Record<string, number>;
  storage?: { segment_count: number; segment_bytes: number };
  queue?: {
    aggregates?: {
      topics?: number;
      channels?: number;
      stored_messages?: number;
      depth?: number;
      in_flight?: number;
      deferred?: number;
    };
  };
}

export interface Broker {
  uid?: string;
  name: string;
  node_name?: string | null;
  pod_ip?: string | null;
  phase?: string | null;
  ready: boolean;
  restarts?: number;
  image?: string | null;
  image_id?: string | null;
  started_at?: string | null;
  pvc?: Pvc | null;
  observation?: Observation | null;
  error?: string | null;
}

export interface ManagedFields {
  managed_phase?: string | null;
  management_revision?: number | null;
  tombstone_until_ms?: number | null;
  management_error?: string | null;
}

export interface Channel extends ManagedFields {
  name: string;
  owners: string[];
  depth: number;
  in_flight: number;
  deferred: number;
  ack_gap?: number;
  paused: boolean;
  ephemeral: boolean;
}

export interface Topic extends ManagedFields {
  name: string;
  owners: string[];
  paused: boolean;
  stored_messages?: number;
  segment_count?: number;
  segment_bytes?: number;
  channels: Channel[];
}

export interface Summary {
  stored_messages?: number;
  depth?: number;
  in_flight?: number;
  deferred?: number;
  connections?: number;
  publish_per_second?: number;
  deliver_per_second?: number;
  finish_per_second?: number;
  publish_bytes_per_second?: number;
  retry_total?: number;
  dead_letter_total?: number;
  throttled_total?: number;
}

export interface Storage {
  total_bytes?: number;
  available_bytes?: number;
  used_percent?: number;
  segment_count?: number;
  segment_bytes?: number;
  pressure_brokers?: string[];
  fsync?: HistogramSnapshot;
  group_commit_wait?: HistogramSnapshot;
  payload_read?: HistogramSnapshot;
  scrub?: HistogramSnapshot;
  gc?: HistogramSnapshot;
}

export interface Sample {
  at_ms: number;
  publish_per_second: number;
  deliver_per_second: number;
  finish_per_second: number;
  publish_bytes_per_second?: number;
  depth: number;
  in_flight: number;
  disk_used_percent?: number;
}

export interface Anomaly {
  severity: 'warning' | 'critical' | string;
  code: string;
  message?: string;
  broker?: string;
}

export interface KubeEvent {
  type: string;
  reason: string;
  message: string;
  object_kind: string;
  object_name: string;
  count: number;
  last_seen_ms: number;
}

/** The operator's operation, as in the RustQueue's status (camelCase there). */
export interface Operation {
  id: string;
  kind: string;
  phase: string;
  target?: string;
  revision?: string;
  message?: string;
  startedAt: string;
  updatedAt?: string;
  completedAt?: string | null;
  currentBroker?: string | null;
}

export interface Snapshot {
  schema_version: number;
  collected_at_ms: number;
  complete: boolean;
  errors: string[];
  cluster: {
    name: string;
    namespace: string;
    phase?: string | null;
    message?: string | null;
    desired_brokers?: number | null;
    ready_brokers?: number | null;
    active_storage_feature_level?: number | null;
    observed_generation?: number | null;
    generation?: number | null;
    spec?: Record<string, unknown> | null;
  };
  summary: Summary;
  brokers: Broker[];
  topics: Topic[];
  storage: Storage;
  conditions: Condition[];
  current_operation?: Operation | null;
  operation_history?: Operation[];
  events?: KubeEvent[];
  anomalies: Anomaly[];
  history: Sample[];
  management: { enabled: boolean; registry_available?: boolean; crd_fresh?: boolean };
}

export interface ManagementStatus {
  enabled: boolean;
  unlocked: boolean;
  expires_at_ms?: number | null;
  csrf_token?: string | null;
  confirmation: string;
}

export interface PreviewRequest {
  kind: 'topic' | 'channel';
  action: 'create' | 'pause' | 'unpause' | 'empty' | 'delete' | 'retry';
  topic: string;
  channel: string | null;
}

export interface Preview {
  action_token: string;
  expires_at_ms: number;
  confirmation_required: boolean;
  impact: {
    owners: string[];
    stored_messages?: number;
    depth?: number;
    in_flight?: number;
    deferred?: number;
    connections?: number;
    warnings: string[];
  };
}

/** An error the backend answered with: `{code, detail}`. */
export class ApiError extends Error {
  constructor(
    public readonly status: number,
    public readonly code: string,
    public readonly detail: string,
  ) {
    super(`${code}: ${detail}`);
  }
}

async function parse<T>(res: Response): Promise<T> {
  const text = await res.text();
  let body: unknown = null;
  try {
    body = text ? JSON.parse(text) : null;
  } catch {
    body = null;
  }
  if (!res.ok) {
    const b = (body ?? {}) as { code?: string; detail?: string; status?: string };
    throw new ApiError(res.status, b.code ?? b.status ?? `HTTP ${res.status}`, b.detail ?? text);
  }
  return body as T;
}

export type SnapshotResult =
  | { state: 'ok'; snapshot: Snapshot }
  | { state: 'collecting' }
  | { state: 'error'; message: string };

export async function fetchSnapshot(): Promise<SnapshotResult> {
  try {
    const res = await fetch('api/v1/snapshot', { cache: 'no-store' });
    if (res.status === 503) {
      return { state: 'collecting' };
    }
    return { state: 'ok', snapshot: await parse<Snapshot>(res) };
  } catch (e) {
    return { state: 'error', message: e instanceof Error ? e.message : String(e) };
  }
}

export async function fetchManagement(): Promise<ManagementStatus> {
  return parse<ManagementStatus>(await fetch('api/v1/management', { cache: 'no-store' }));
}

async function post<T>(path: string, body: unknown, csrf?: string | null): Promise<T> {
  const headers: Record<string, string> = { 'Content-Type': 'application/json' };
  if (csrf) {
    headers['X-RustQueue-CSRF'] = csrf;
  }
  const res = await fetch(`api/v1/management/${path}`, {
    method: 'POST',
    headers,
    body: JSON.stringify(body),
    credentials: 'same-origin',
  });
  return parse<T>(res);
}

export const management = {
  /** Answers the session's `{unlocked, expires_at_ms, csrf_token}` (and sets its cookie). */
  unlock: (confirmation: string) =>
    post<Partial<ManagementStatus>>('unlock', { confirmation }),
  lock: (csrf: string | null | undefined) => post<unknown>('lock', {}, csrf),
  preview: (req: PreviewRequest, csrf: string | null | undefined) =>
    post<Preview>('preview', req, csrf),
  apply: (
    req: PreviewRequest & { action_token: string; confirmation: string | null },
    csrf: string | null | undefined,
  ) => post<{ status: string; operation_id: string }>('apply', req, csrf),
};

/** The snapshot is stale when it is older than three polls (and at least 10 s). */
export function isStale(s: Snapshot, nowMs: number, pollMs = 2000): boolean {
  return nowMs - s.collected_at_ms > Math.max(3 * pollMs, 10_000);
}
