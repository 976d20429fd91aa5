// The management flow's dialogs (docs/console.md): unlock with the typed `<namespace>/<name>`,
// then for each action a preview that names the owners and the impact, a typed confirmation
// when the backend asks for one, and apply. Shown only when the backend says management is on.

import {
  createContext,
  useCallback,
  useContext,
  useEffect,
  useState,
  type ReactNode,
} from 'react';
import { HeaderGlobalAction, InlineNotification, Modal, TextInput } from '@carbon/react';
import { Locked, Unlocked } from '@carbon/icons-react';
import {
  ApiError,
  fetchManagement,
  management,
  type ManagementStatus,
  type Preview,
  type PreviewRequest,
} from './api';
import { useI18n, type MessageKey } from './i18n';
import { count } from './format';

interface Mgmt {
  status: ManagementStatus | null;
  refresh: () => Promise<void>;
  /** Opens the preview/apply dialog for `req` (unlocking first when locked). */
  act: (req: PreviewRequest) => void;
  /** Opens the create dialog for a topic, or for a channel of `topic`. */
  create: (kind: 'topic' | 'channel', topic?: string) => void;
  openUnlock: () => void;
}

const Ctx = createContext<Mgmt | null>(null);

export function useManagement(): Mgmt {
  const v = useContext(Ctx);
  if (!v) throw new Error('useManagement outside ManagementProvider');
  return v;
}

function errorText(e: unknown): { code: string; detail: string } {
  if (e instanceof ApiError) return { code: e.code, detail: e.detail };
  return { code: 'E_NETWORK', detail: e instanceof Error ? e.message : String(e) };
}

export function ManagementProvider({ children }: { children: ReactNode }) {
  const [status, setStatus] = useState<ManagementStatus | null>(null);
  const [unlockOpen, setUnlockOpen] = useState(false);
  const [pending, setPending] = useState<PreviewRequest | null>(null);
  const [creating, setCreating] = useState<{ kind: 'topic' | 'channel'; topic?: string } | null>(
    null,
  );
  const refresh = useCallback(async () => {
    try {
      setStatus(await fetchManagement());
    } catch {
      setStatus(null);
    }
  }, []);
  useEffect(() => {
    void refresh();
  }, [refresh]);
  // The session has a fixed expiry: refresh the status when it passes.
  useEffect(() => {
    if (!status?.unlocked || !status.expires_at_ms) return;
    const wait = Math.max(1000, status.expires_at_ms - Date.now() + 500);
    const id = window.setTimeout(() => void refresh(), wait);
    return () => window.clearTimeout(id);
  }, [status, refresh]);
  const value: Mgmt = {
    status,
    refresh,
    act: (req) => (status?.unlocked ? setPending(req) : setUnlockOpen(true)),
    create: (kind, topic) => (status?.unlocked ? setCreating({ kind, topic }) : setUnlockOpen(true)),
    openUnlock: () => setUnlockOpen(true),
  };
  return (
    <Ctx.Provider value={value}>
      {children}
      {unlockOpen && status && (
        <UnlockDialog
          status={status}
          onClose={() => setUnlockOpen(false)}
          onUnlocked={(s) => {
            setStatus((prev) => (prev ? { ...prev, ...s } : prev));
            setUnlockOpen(false);
            void refresh();
          }}
        />
      )}
      {creating && (
        <CreateDialog
          kind={creating.kind}
          topic={creating.topic}
          onClose={() => setCreating(null)}
          onNext={(req) => {
            setCreating(null);
            setPending(req);
          }}
        />
      )}
      {pending && status && (
        <ActionDialog req={pending} status={status} onClose={() => setPending(null)} />
      )}
    </Ctx.Provider>
  );
}

/** The header's lock button: unlock when locked, lock when unlocked; absent when management is off. */
export function ManagementHeaderAction() {
  const { t } = useI18n();
  const { status, openUnlock, refresh } = useManagement();
  if (!status?.enabled) return null;
  if (!status.unlocked) {
    return (
      <HeaderGlobalAction
        aria-label={t('mgmt.unlock')}
        data-testid="management-unlock"
        onClick={openUnlock}
      >
        <Locked size={20} />
      </HeaderGlobalAction>
    );
  }
  return (
    <HeaderGlobalAction
      aria-label={t('mgmt.lock')}
      data-testid="management-lock"
      onClick={async () => {
        await management.lock(status.csrf_token).catch(() => undefined);
        await refresh();
      }}
    >
      <Unlocked size={20} />
    </HeaderGlobalAction>
  );
}

function ErrorNote({ error }: { error: { code: string; detail: string } | null }) {
  if (!error) return null;
  return (
    <InlineNotification
      kind="error"
      lowContrast
      hideCloseButton
      title={error.code}
      subtitle={error.detail}
      data-testid="management-error"
    />
  );
}

function UnlockDialog({
  status,
  onClose,
  onUnlocked,
}: {
  status: ManagementStatus;
  onClose: () => void;
  onUnlocked: (s: Partial<ManagementStatus>) => void;
}) {
  const { t } = useI18n();
  const [text, setText] = useState('');
  const [error, setError] = useState<{ code: string; detail: string } | null>(null);
  const [busy, setBusy] = useState(false);
  const submit = async () => {
    setBusy(true);
    try {
      onUnlocked(await management.unlock(text));
    } catch (e) {
      setError(errorText(e));
    } finally {
      setBusy(false);
    }
  };
  return (
    <Modal
      open
      modalHeading={t('mgmt.unlockTitle')}
      primaryButtonText={t('mgmt.unlock')}
      secondaryButtonText={t('mgmt.cancel')}
      primaryButtonDisabled={busy || text.length === 0}
      onRequestClose={onClose}
      onRequestSubmit={submit}
      data-testid="unlock-dialog"
    >
      <p>{t('mgmt.unlockBody')}</p>
      <TextInput
        id="unlock-confirmation"
        labelText={t('mgmt.typeToConfirm', { text: status.confirmation })}
        placeholder={status.confirmation}
        value={text}
        onChange={(e) => setText(e.target.value)}
        autoComplete="off"
      />
      <ErrorNote error={error} />
    </Modal>
  );
}

function CreateDialog({
  kind,
  topic,
  onClose,
  onNext,
}: {
  kind: 'topic' | 'channel';
  topic?: string;
  onClose: () => void;
  onNext: (req: PreviewRequest) => void;
}) {
  const { t } = useI18n();
  const [topicName, setTopicName] = useState(topic ?? '');
  const [channel, setChannel] = useState('');
  const ready = topicName.length > 0 && (kind === 'topic' || channel.length > 0);
  return (
    <Modal
      open
      modalHeading={kind === 'topic' ? t('mgmt.createTopic') : t('mgmt.createChannel')}
      primaryButtonText={t('mgmt.preview')}
      secondaryButtonText={t('mgmt.cancel')}
      primaryButtonDisabled={!ready}
      onRequestClose={onClose}
      onRequestSubmit={() =>
        onNext({
          kind,
          action: 'create',
          topic: topicName,
          channel: kind === 'channel' ? channel : null,
        })
      }
      data-testid="create-dialog"
    >
      <TextInput
        id="create-topic"
        labelText={t('col.topic')}
        value={topicName}
        disabled={kind === 'channel' && topic !== undefined}
        onChange={(e) => setTopicName(e.target.value)}
        autoComplete="off"
      />
      {kind === 'channel' && (
        <TextInput
          id="create-channel"
          labelText={t('col.channel')}
          value={channel}
          onChange={(e) => setChannel(e.target.value)}
          autoComplete="off"
        />
      )}
    </Modal>
  );
}

function ActionDialog({
  req,
  status,
  onClose,
}: {
  req: PreviewRequest;
  status: ManagementStatus;
  onClose: () => void;
}) {
  const { t, locale } = useI18n();
  const [preview, setPreview] = useState<Preview | null>(null);
  const [error, setError] = useState<{ code: string; detail: string } | null>(null);
  const [confirmation, setConfirmation] = useState('');
  const [done, setDone] = useState<string | null>(null);
  const [busy, setBusy] = useState(false);
  useEffect(() => {
    management
      .preview(req, status.csrf_token)
      .then(setPreview)
      .catch((e: unknown) => setError(errorText(e)));
  }, [req, status.csrf_token]);
  const subject = req.channel ? `${req.topic}/${req.channel}` : req.topic;
  const apply = async () => {
    if (!preview) return;
    setBusy(true);
    setError(null);
    try {
      const r = await management.apply(
        {
          ...req,
          action_token: preview.action_token,
          confirmation: preview.confirmation_required ? confirmation : null,
        },
        status.csrf_token,
      );
      setDone(r.operation_id);
    } catch (e) {
      setError(errorText(e));
    } finally {
      setBusy(false);
    }
  };
  const heading = t('mgmt.actionTitle', {
    action: t(`action.${req.action}` as MessageKey),
    subject,
  });
  return (
    <Modal
      open
      danger={req.action === 'delete' || req.action === 'empty'}
      modalHeading={heading}
      primaryButtonText={done ? t('mgmt.close') : t('mgmt.apply')}
      secondaryButtonText={t('mgmt.cancel')}
      primaryButtonDisabled={
        !done && (busy || !preview || (preview.confirmation_required && confirmation.length === 0))
      }
      onRequestClose={onClose}
      onRequestSubmit={done ? onClose : apply}
      data-testid="action-dialog"
    >
      {preview && (
        <div data-testid="preview">
          <p>{t('mgmt.owners', { owners: preview.impact.owners.join(', ') || '—' })}</p>
          <p>
            {t('mgmt.impact', {
              stored: count(preview.impact.stored_messages, locale),
              depth: count(preview.impact.depth, locale),
              inflight: count(preview.impact.in_flight, locale),
            })}
          </p>
          {preview.impact.warnings.map((w) => (
            <InlineNotification
              key={w}
              kind="warning"
              lowContrast
              hideCloseButton
              title={t(`warning.${w}` as MessageKey)}
            />
          ))}
          {preview.confirmation_required && !done && (
            <TextInput
              id="action-confirmation"
              labelText={t('mgmt.typeToConfirm', { text: req.channel ?? req.topic })}
              value={confirmation}
              onChange={(e) => setConfirmation(e.target.value)}
              autoComplete="off"
            />
          )}
        </div>
      )}
      {done && (
        <InlineNotification
          kind="success"
          lowContrast
          hideCloseButton
          title={t('mgmt.accepted')}
          subtitle={t('mgmt.acceptedDetail', { id: done })}
          data-testid="management-accepted"
        />
      )}
      <ErrorNote error={error} />
    </Modal>
  );
}
