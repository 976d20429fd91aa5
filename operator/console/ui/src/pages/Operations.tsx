import type { Operation, Snapshot } from '../api';
import { PhaseTag, SimpleTable } from '../components';
import { useI18n } from '../i18n';

function opColumns(t: ReturnType<typeof useI18n>['t']) {
  return [
    { key: 'kind', header: t('col.kind'), cell: (o: Operation) => o.kind },
    { key: 'phase', header: t('col.phase'), cell: (o: Operation) => <PhaseTag value={o.phase} /> },
    { key: 'target', header: t('col.target'), cell: (o: Operation) => o.currentBroker ?? o.target ?? '' },
    { key: 'revision', header: t('col.revision'), cell: (o: Operation) => <span className="rq-mono">{o.revision ?? ''}</span> },
    { key: 'started', header: t('col.started'), cell: (o: Operation) => o.startedAt },
    { key: 'finished', header: t('col.finished'), cell: (o: Operation) => o.completedAt ?? '' },
    { key: 'message', header: t('col.message'), cell: (o: Operation) => o.message ?? '' },
  ];
}

export default function Operations({ s }: { s: Snapshot }) {
  const { t } = useI18n();
  const op = s.current_operation;
  const history = (s.operation_history ?? []).slice(-20).reverse();
  const events = s.events ?? [];
  return (
    <div className="rq-page" data-testid="page-operations">
      <h1>{t('nav.operations')}</h1>
      <h2>{t('operations.current')}</h2>
      {op ? (
        <SimpleTable rows={[op]} rowKey={(o) => o.id} empty="" testid="current-operation" columns={opColumns(t)} />
      ) : (
        <p>{t('overview.noOperation')}</p>
      )}
      <h2>{t('operations.history')}</h2>
      <SimpleTable
        rows={history}
        rowKey={(o) => o.id}
        empty={t('common.none')}
        testid="operation-history"
        columns={opColumns(t)}
      />
      <h2>{t('operations.events')}</h2>
      <SimpleTable
        rows={events}
        rowKey={(e) => `${e.object_kind}/${e.object_name}/${e.reason}/${e.last_seen_ms}/${e.message}`}
        empty={t('common.none')}
        testid="events"
        columns={[
          { key: 'type', header: t('col.type'), cell: (e) => e.type },
          { key: 'reason', header: t('col.reason'), cell: (e) => e.reason },
          { key: 'object', header: t('col.object'), cell: (e) => `${e.object_kind}/${e.object_name}` },
          { key: 'message', header: t('col.message'), cell: (e) => e.message },
          { key: 'count', header: t('col.count'), cell: (e) => String(e.count) },
          {
            key: 'last',
            header: t('col.lastSeen'),
            cell: (e) => (e.last_seen_ms ? new Date(e.last_seen_ms).toISOString() : ''),
          },
        ]}
      />
    </div>
  );
}
