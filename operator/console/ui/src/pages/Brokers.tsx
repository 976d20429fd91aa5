import type { Broker, Snapshot } from '../api';
import { PhaseTag, SimpleTable } from '../components';
import { bytes, count, percent } from '../format';
import { useI18n } from '../i18n';

function diskCell(b: Broker) {
  const d = b.observation?.disk;
  if (!d) return null;
  return `${percent(d.used_percent)} (${bytes(d.total_bytes - d.available_bytes)} / ${bytes(d.total_bytes)})`;
}

export default function Brokers({ s }: { s: Snapshot }) {
  const { t, locale } = useI18n();
  const na = <span className="rq-unavailable">{t('common.unavailable')}</span>;
  return (
    <div className="rq-page" data-testid="page-brokers">
      <h1>{t('nav.brokers')}</h1>
      <SimpleTable
        rows={s.brokers}
        rowKey={(b) => b.name}
        empty={t('brokers.none')}
        testid="brokers-table"
        columns={[
          { key: 'name', header: t('col.broker'), cell: (b) => b.name },
          {
            key: 'ready',
            header: t('col.ready'),
            cell: (b) => <PhaseTag value={b.ready ? 'Ready' : (b.phase ?? 'Pending')} />,
          },
          { key: 'node', header: t('col.node'), cell: (b) => b.node_name ?? na },
          { key: 'ip', header: t('col.ip'), cell: (b) => b.pod_ip ?? na },
          {
            key: 'image',
            header: t('col.image'),
            cell: (b) => <span className="rq-mono">{b.image ?? ''}</span>,
          },
          {
            key: 'pvc',
            header: t('col.pvc'),
            cell: (b) => (b.pvc ? `${b.pvc.capacity ?? b.pvc.requested ?? '—'} (${b.pvc.phase ?? '—'})` : na),
          },
          { key: 'disk', header: t('col.diskUsed'), cell: (b) => diskCell(b) ?? na },
          { key: 'restarts', header: t('col.restarts'), cell: (b) => count(b.restarts, locale) },
          {
            key: 'depth',
            header: t('col.depth'),
            cell: (b) => {
              const d = b.observation?.queue?.aggregates?.depth;
              return d === undefined ? na : count(d, locale);
            },
          },
          { key: 'error', header: t('col.error'), cell: (b) => b.error ?? '' },
        ]}
      />
    </div>
  );
}
