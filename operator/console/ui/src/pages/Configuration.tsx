import type { Snapshot } from '../api';
import { SimpleTable } from '../components';
import { useI18n } from '../i18n';

function flatten(value: unknown, prefix = ''): [string, string][] {
  if (value === null || typeof value !== 'object') {
    return [[prefix, value === null ? 'null' : String(value)]];
  }
  if (Array.isArray(value)) {
    return value.length === 0 ? [[prefix, '[]']] : value.flatMap((v, i) => flatten(v, `${prefix}[${i}]`));
  }
  const entries = Object.entries(value as Record<string, unknown>);
  if (entries.length === 0) return [[prefix, '{}']];
  return entries.flatMap(([k, v]) => flatten(v, prefix ? `${prefix}.${k}` : k));
}

export default function Configuration({ s }: { s: Snapshot }) {
  const { t } = useI18n();
  const rows = flatten(s.cluster.spec ?? {});
  return (
    <div className="rq-page" data-testid="page-configuration">
      <h1>{t('nav.configuration')}</h1>
      <p>{t('configuration.intro', { name: `${s.cluster.namespace}/${s.cluster.name}` })}</p>
      <SimpleTable
        rows={rows}
        rowKey={([k]) => k}
        empty={t('common.unavailable')}
        testid="spec"
        columns={[
          { key: 'field', header: t('col.field'), cell: ([k]) => <span className="rq-mono">spec.{k}</span> },
          { key: 'value', header: t('col.value'), cell: ([, v]) => <span className="rq-mono">{v}</span> },
        ]}
      />
    </div>
  );
}
