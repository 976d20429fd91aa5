import type { Snapshot } from '../api';
import { PhaseTag, SimpleTable } from '../components';
import { useI18n } from '../i18n';

export default function Operations({ s }: { s: Snapshot }) {
  const { t } = useI18n();
  const op = s.current_operation;
  const history = (s.operation_history ?? []).slice(0, 20);
  const events = s.events ?? [];
  return (
    <div className="rq-page" data-testid="page-operations">
      <h1>{t('nav.operations')}</h1>
      <h2>{t('operations.current')}</h2>
      {op ? (
        <SimpleTable
          rows={[op]}
          rowKey={() => 'current'}
          empty=""
          testid="current-operation"
          columns={[
            { key: 'kind', header: t('col.kind'), cell: (o) => String(o.kind ?? '') },
            { key: 'phase', header: t('col.phase'), cell: (o) => <PhaseTag value={o.phase as string} /> },
            { key: 'stage', header: t('col.stage'), cell: (o) => String(o.stage ?? '') },
            { key: 'revision', header: t('col.revision'), cell: (o) => String(o.revision ?? '') },
            { key: 'started', header: t('col.started'), cell: (o) => String(o.started_at ?? '') },
            { key: 'message', header: t('col.message'), cell: (o) => String(o.message ?? '') },
          ]}
        />
      ) : (
        <p>{t('overview.noOperation')}</p>
      )}
      <h2>{t('operations.history')}</h2>
      <SimpleTable
        rows={history}
        rowKey={(o) => `${o.kind}-${o.started_at}-${o.finished_at}`}
        empty={t('common.none')}
        testid="operation-history"
        columns={[
          { key: 'kind', header: t('col.kind'), cell: (o) => String(o.kind ?? '') },
          { key: 'phase', header: t('col.phase'), cell: (o) => <PhaseTag value={o.phase as string} /> },
          { key: 'revision', header: t('col.revision'), cell: (o) => String(o.revision ?? '') },
          { key: 'started', header: t('col.started'), cell: (o) => String(o.started_at ?? '') },
          { key: 'finished', header: t('col.finished'), cell: (o) => String(o.finished_at ?? '') },
          { key: 'message', header: t('col.message'), cell: (o) => String(o.message ?? '') },
        ]}
      />
      <h2>{t('operations.events')}</h2>
      <SimpleTable
        rows={events}
        rowKey={(e) => `${e.object}-${e.reason}-${e.last_timestamp}-${e.message}`}
        empty={t('common.none')}
        testid="events"
        columns={[
          { key: 'type', header: t('col.type'), cell: (e) => e.type ?? '' },
          { key: 'reason', header: t('col.reason'), cell: (e) => e.reason ?? '' },
          { key: 'object', header: t('col.object'), cell: (e) => e.object ?? '' },
          { key: 'message', header: t('col.message'), cell: (e) => e.message ?? '' },
          { key: 'count', header: t('col.count'), cell: (e) => String(e.count ?? 1) },
          { key: 'last', header: t('col.lastSeen'), cell: (e) => e.last_timestamp ?? '' },
        ]}
      />
    </div>
  );
}
