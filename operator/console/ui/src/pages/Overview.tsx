import { LineChart, ScaleTypes } from '@carbon/charts-react';
import '@carbon/charts-react/styles.css';
import { InlineNotification } from '@carbon/react';
import type { Snapshot } from '../api';
import { ConditionTag, Figure, SimpleTable, useChartTheme } from '../components';
import { age, count, percent, rate } from '../format';
import { useI18n, type MessageKey } from '../i18n';

function Charts({ s }: { s: Snapshot }) {
  const { t } = useI18n();
  const theme = useChartTheme();
  const time = (ms: number) => new Date(ms);
  const throughput = s.history.flatMap((p) => [
    { group: t('chart.publish'), date: time(p.at_ms), value: p.publish_per_second },
    { group: t('chart.deliver'), date: time(p.at_ms), value: p.deliver_per_second },
    { group: t('chart.finish'), date: time(p.at_ms), value: p.finish_per_second },
  ]);
  const depth = s.history.flatMap((p) => [
    { group: t('chart.depth'), date: time(p.at_ms), value: p.depth },
    { group: t('chart.inFlight'), date: time(p.at_ms), value: p.in_flight },
  ]);
  const options = (title: string, unit: string) => ({
    title,
    axes: {
      bottom: { mapsTo: 'date', scaleType: ScaleTypes.TIME, title: t('chart.time') },
      left: { mapsTo: 'value', scaleType: ScaleTypes.LINEAR, title: unit },
    },
    curve: 'curveMonotoneX',
    height: '280px',
    theme,
    animations: false,
    toolbar: { enabled: false },
    points: { enabled: false },
  });
  if (s.history.length < 2) {
    return <p className="rq-unavailable">{t('overview.trendCollecting')}</p>;
  }
  return (
    <>
      <div className="rq-chart" data-testid="chart-throughput">
        <LineChart data={throughput} options={options(t('chart.throughputTitle'), t('unit.msgPerSec'))} />
      </div>
      <div className="rq-chart" data-testid="chart-depth">
        <LineChart data={depth} options={options(t('chart.depthTitle'), t('unit.messages'))} />
      </div>
    </>
  );
}

export default function Overview({ s, now }: { s: Snapshot; now: number }) {
  const { t, locale } = useI18n();
  const sum = s.summary;
  const op = s.current_operation;
  return (
    <div className="rq-page" data-testid="page-overview">
      <h1>{t('overview.title', { name: `${s.cluster.namespace}/${s.cluster.name}` })}</h1>
      <div className="rq-tiles">
        <Figure label={t('overview.phase')} value={s.cluster.phase ?? '—'} testid="phase" />
        <Figure
          label={t('overview.brokers')}
          value={`${s.cluster.ready_brokers ?? '—'} / ${s.cluster.desired_brokers ?? '—'}`}
          testid="brokers-ready"
        />
        <Figure label={t('overview.stored')} value={count(sum.stored_messages, locale)} testid="stored" />
        <Figure label={t('overview.depth')} value={count(sum.depth, locale)} testid="depth" />
        <Figure label={t('overview.inFlight')} value={count(sum.in_flight, locale)} testid="in-flight" />
        <Figure label={t('overview.publishRate')} value={rate(sum.publish_per_second, t('unit.msgPerSec'), locale)} testid="publish-rate" />
        <Figure label={t('overview.deliverRate')} value={rate(sum.deliver_per_second, t('unit.msgPerSec'), locale)} testid="deliver-rate" />
        <Figure label={t('overview.diskUsed')} value={percent(s.storage.used_percent)} testid="disk-used" />
      </div>
      {s.anomalies.length > 0 && <h2>{t('overview.anomalies')}</h2>}
      {s.anomalies.map((a, i) => (
        <InlineNotification
          key={`${a.code}-${i}`}
          kind={a.severity === 'critical' ? 'error' : 'warning'}
          lowContrast
          hideCloseButton
          title={t(`anomaly.${a.code}` as MessageKey)}
          subtitle={[a.broker, a.message].filter(Boolean).join(': ')}
        />
      ))}
      <h2>{t('overview.trend')}</h2>
      <Charts s={s} />
      <h2>{t('overview.operation')}</h2>
      {op ? (
        <p data-testid="current-operation">
          {t('overview.operationLine', {
            kind: op.kind,
            phase: op.phase,
            target: op.currentBroker ?? op.target ?? '—',
            age: age(Date.parse(op.startedAt), now),
          })}
          {op.phase === 'AwaitingCanaryApproval' && op.revision
            ? ` ${t('overview.approve', { revision: op.revision })}`
            : ''}
        </p>
      ) : (
        <p data-testid="current-operation">{t('overview.noOperation')}</p>
      )}
      <SimpleTable
        title={t('overview.conditions')}
        rows={s.conditions}
        rowKey={(c) => c.type}
        empty={t('common.none')}
        testid="conditions"
        columns={[
          { key: 'type', header: t('col.type'), cell: (c) => c.type },
          { key: 'status', header: t('col.status'), cell: (c) => <ConditionTag type={c.type} status={c.status} /> },
          { key: 'reason', header: t('col.reason'), cell: (c) => c.reason ?? '' },
          { key: 'message', header: t('col.message'), cell: (c) => c.message ?? '' },
        ]}
      />
    </div>
  );
}
